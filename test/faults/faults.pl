# dlock under Patroni with faults beyond crashes (make test-faults; run by
# test/faults/run.sh inside the controller's network namespace, as root).
#
# etcd and three Patroni nodes (PostgreSQL 15, dlock preloaded), each in a
# namespace of its own (FaultCluster.pm), and three client namespaces:
#  - in each, a lock-guarded set workload (client.c "set": acquire, insert
#    a unique element under dlock.fence(), release; 3 workers, 4 names,
#    ttl 3 s);
#  - in c1, a "dlock run" (ttl 6 s) whose child writes rows under
#    $DLOCK_TOKEN; it is started again whenever it ends;
#  - in c2, a contender that tries the same name every 50 ms.
# Every operation is recorded; FaultHistory.pm checks the history against
# the tables at the end of each segment.
#
# A segment is the workload run across a plan of faults: one nemesis
# alone, or a random schedule (seeded).  After each fault is healed the
# cluster must come back whole (a leader, two streaming replicas, with
# synchronous mode a synchronous standby) before the next.
#
# Verdicts (TAP), synchronous mode: no acknowledged element lost, none
# present whose write failed, no write under a superseded token, each
# name's writes in token order, each epoch's tokens above the earlier
# epochs', and every dlock run that lost its lease stopped its child before
# the name was granted to the contender (the gap is never negative).  In
# both modes every dlock run that lost its lease stopped its child before
# the expiry the server gave its last renew, and a postmaster killed with
# -9 leaves none of its processes behind.  In
# asynchronous mode the losses and the time two primaries took writes are
# figures; what must still hold is checked (no phantom, table order, token
# order).  Faults outside what dlock promises (a server clock stepped
# ahead past the margin of dlock run; a new primary's clock far behind, in
# asynchronous mode) are run for their figures, and their verdicts say so.
#
# The nemeses are recorded in the history with the operations, and so is
# what dlock run says (runlog.pl: each renew with the expiry the server
# returned, the moment it gives the lease up); a segment's directory holds
# all a replay needs (check.pl).
#
# Environment (set by run.sh): FAULTS_TAG, FAULTS_WORK, PG_BINDIR,
# FAULTS_USER, FAULTS_CLIENT, DLOCK_CLI, PATRONI, ETCD, FAULTS_LIBFAKETIME;
# FAULTS_MINUTES, FAULTS_RANDOM_MINUTES, FAULTS_SEED, FAULTS_ONLY,
# FAULTS_MODES, FAULTS_KEEP as run.sh describes; FAULTS_KEEP_ALL=1 (keep
# the history of a passing run too).

use strict;
use warnings FATAL => 'all';

use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use List::Util qw(max min shuffle sum0);
use Test::More;
our $TODO;
use Time::HiRes qw(time sleep);

use DlockHA qw(child_pids lines_of);
use FaultCluster;
use FaultHistory;

$SIG{$_} = sub { die "terminated by SIG$_[0]\n" } for qw(INT TERM HUP);
my $started = time;
my $work = $ENV{FAULTS_WORK} or die 'FAULTS_WORK is not set';
my $client = $ENV{FAULTS_CLIENT} or die 'FAULTS_CLIENT is not set';
my $dlock = $ENV{DLOCK_CLI} or die 'DLOCK_CLI is not set';
my $user = $ENV{FAULTS_USER} // 'postgres';
my $seed = $ENV{FAULTS_SEED} // (int(time) % 1000000);
srand($seed);
note "seed $seed (FAULTS_SEED=$seed repeats these schedules)";
delete $ENV{$_} for qw(PGHOST PGPORT PGDATABASE PGUSER PGSERVICE PGDATA PGTARGETSESSIONATTRS);

my $c = FaultCluster->new(tag => $ENV{FAULTS_TAG}, work => $work, bindir => $ENV{PG_BINDIR},
	user => $user, patroni => $ENV{PATRONI} // 'patroni', etcd => $ENV{ETCD} // 'etcd',
	faketime => $ENV{FAULTS_LIBFAKETIME}, delay => $ENV{FAULTS_DELAY});
my %figures;    # label => check result and settings, for the tables
my @labels;     # in the order they ran
END
{
	my $rc = $?;
	eval { $c->stop_all if $c; 1 } or warn $@;
	# a run that died midway keeps its history too
	keep_history() if $rc || !Test::More->builder->is_passing || $ENV{FAULTS_KEEP_ALL};
	$? = $rc;
}

my $conninfo = FaultCluster::client_conninfo();
mkdir "$work/hist";
$c->chown("$work/hist");
# the recorder of dlock run's messages, where the clients' user reads it
my $runlog = "$work/runlog.pl";
copy(dirname(__FILE__) . '/runlog.pl', $runlog) or die "runlog.pl: $!";
$c->chown($runlog);

# ---- the cluster ----
my $t0 = time;
$c->start_cluster(sync => 1);
note sprintf('cluster up after %.1f s: %s', time - $t0, $c->describe);
my $leader = $c->leader;
is($c->psql($c->conninfo($_), 'SHOW shared_preload_libraries'), 'dlock', "$_ has dlock in shared_preload_libraries")
  for @FaultCluster::NODES;
# each node's clock follows its libfaketime setting: 100 s ahead for a
# moment (the setting is read again every second)
$c->clock($_, '+100') for @FaultCluster::NODES;
sleep 2.5;
for my $node (@FaultCluster::NODES)
{
	my $t = $c->psql($c->conninfo($node), 'SELECT extract(epoch FROM clock_timestamp())');
	my $ahead = ($t =~ /^\d+(\.\d+)?$/ ? $t : 0) - time;
	ok(abs($ahead - 100) < 5, sprintf('%s runs PostgreSQL under libfaketime (its clock set 100 s ahead reads %.1f s ahead)',
		$node, $ahead));
}
$c->heal;
sleep 2.5;
$c->psql($c->conninfo($leader), q{
	CREATE EXTENSION dlock;
	CREATE TABLE fault_set (id bigserial PRIMARY KEY, name text NOT NULL, token bigint NOT NULL,
	                        elem text NOT NULL UNIQUE, node inet);
	CREATE TABLE fault_child (id bigserial PRIMARY KEY, name text NOT NULL, token bigint NOT NULL,
	                          elem text NOT NULL UNIQUE)});

# ---- the workload ----
my %load;
my %opts;    # label => {run_ttl}

sub start_load
{
	my ($label) = @_;
	my $dir = "$work/hist/$label";
	make_path($dir);
	$c->chown($dir);
	%load = (label => $label, dir => $dir, runs => [], n => 0, run_ttl => $opts{$label}{run_ttl} // '6s');
	for my $cl (@FaultCluster::CLIENTS)
	{
		$c->start("set-$cl", $cl, $user, {}, $client, 'set', $conninfo, "$dir/$cl.hist",
			"$label.$cl", 3, 4, '3s');
	}
	$c->start('contend', 'c2', $user, {}, $client, 'contend', $conninfo, "$dir/contend.hist",
		"$label.contend", "job:$label");
	start_run();
}

# start_run - a dlock run of the segment's job, its child recording to a
# history file of its own, and its messages (-v) to another through
# runlog.pl (the renews with the expiry the server gave, the moment it gave
# the lease up).  bash execs dlock, so the pid held is dlock's own.
sub start_run
{
	my $n = ++$load{n};
	my $proc = "$load{label}.run$n";
	$c->start("run", 'c1', $user, { FAULTS_CONNINFO => $conninfo, FAULTS_RUNLOG => $runlog,
			FAULTS_RUNHIST => "$load{dir}/run$n.cli.hist", FAULTS_RUNPROC => $proc }, 'bash', '-c',
		'exec "$0" "$@" 2> >(exec perl "$FAULTS_RUNLOG" "$FAULTS_RUNHIST" "$FAULTS_RUNPROC")',
		$dlock, 'run', "job:$load{label}",
		'-d', $conninfo, '--ttl', $load{run_ttl}, '--wait', '120s', '--kill-after', '2s', '-v', '--',
		$client, 'child', "$load{dir}/run$n.hist", $proc);
	push @{ $load{runs} }, { proc => $proc, started => time };
}

# tick - a dlock run that ended is recorded and started again
sub tick
{
	return unless $load{label};
	if (!$c->running('run'))
	{
		my $res = $c->stop('run', 1);
		$load{runs}[-1]{exit} = defined $res ? $res >> 8 : undef;
		$load{runs}[-1]{ended} = time;
		start_run();
	}
}

sub wait_ticking
{
	my ($seconds) = @_;
	my $until = time + $seconds;
	while (time < $until) { tick(); sleep 0.2 }
}

sub stop_load
{
	tick();    # a run that ended on its own keeps its exit status
	$c->stop('run', 10);
	$load{runs}[-1]{exit} = 'stopped';
	$c->stop($_, 15) for 'contend', map { "set-$_" } @FaultCluster::CLIENTS;
}

# ---- nemeses ----
# Each returns a description; heal() undoes them all.  kill9-node restarts
# the node's Patroni in its heal step (the after hook).
my %nemesis;
my @after;    # subs run after heal

sub others { my ($p) = @_; return grep { $_ ne $p } @FaultCluster::NODES }

$nemesis{'partition-primary'} = sub {
	my ($p) = @_;
	$c->partition([ $p, 'c1' ], [ 'etcd', others($p), 'c2', 'c3' ]);
	return "$p and c1 cut off from etcd, the standbys, c2 and c3";
};
# the same, timed so that a renew of the dlock run (ttl 30 s, renewed
# every 10 s) is sent after the partition began and is still waiting for
# the synchronous standby when Patroni demotes the old primary (about 5 s
# in); held 26 s, past the lease's expiry on the new primary
$nemesis{'partition-primary-renew'} = sub {
	my ($p) = @_;
	my $log = "$work/logs/run.log";
	$c->poll_until('a renew of dlock run 7.5 s ago', 60, sub {
		open my $fh, '<', $log or return 0;
		my @l = <$fh>;
		my $age = time - (stat $log)[9];
		return @l && $l[-1] =~ /renewed lease/ && $age >= 7.5 && $age < 8.5;
	});
	$c->partition([ $p, 'c1' ], [ 'etcd', others($p), 'c2', 'c3' ]);
	return "$p and c1 cut off from etcd, the standbys, c2 and c3, 2.5 s before dlock run renews";
};
$nemesis{'partition-majority'} = sub {
	my ($p) = @_;
	my ($s1, $s2) = shuffle(others($p));
	$c->partition([ $p, $s1, 'c1' ], [ 'etcd', $s2, 'c2', 'c3' ]);
	return "$p, $s1 and c1 | etcd, $s2, c2 and c3";
};
$nemesis{'partition-client'} = sub {
	$c->partition(['c1'], [ 'etcd', @FaultCluster::NODES, 'c2', 'c3' ]);
	return 'c1 (dlock run, one set client) cut off from every server';
};
$nemesis{'oneway-primary-out'} = sub {
	my ($p) = @_;
	$c->oneway($p, 'etcd', others($p));
	return "$p cannot send to etcd and the standbys (it still receives)";
};
$nemesis{'oneway-client-in'} = sub {
	$c->nft('c1', [ 'ip saddr { ' . join(', ', map { $FaultCluster::ADDR{$_} } @FaultCluster::NODES) . ' } drop' ], []);
	return 'c1 receives nothing from the servers (it still sends)';
};
$nemesis{'loss'} = sub {
	$c->loss(20, 'etcd', @FaultCluster::NODES);
	return '20 % of the packets into etcd and every node dropped';
};
$nemesis{'delay'} = sub {
	$c->delay(150, 100, 'etcd', @FaultCluster::NODES);
	return 'every TCP packet etcd and the nodes send held 150 to 250 ms';
};
$nemesis{'slow-network'} = sub {
	$c->throttle('1mbit', '300ms', 'etcd', @FaultCluster::NODES);
	return 'every server\'s link a 1 Mbit/s token bucket, queueing up to 300 ms';
};
$nemesis{'pause-postmaster'} = sub {
	my ($p) = @_;
	$c->pause($c->postmaster_pid($p));
	return "SIGSTOP of $p\'s postmaster";
};
$nemesis{'pause-primary'} = sub {
	my ($p) = @_;
	my @pids = $c->postgres_pids($p);
	$c->pause(@pids);
	return sprintf('SIGSTOP of all %d PostgreSQL processes of %s', scalar @pids, $p);
};
$nemesis{'pause-client'} = sub {
	my @pids = ($c->pid_of('run'), child_pids($c->pid_of('set-c1')));
	$c->pause(@pids);
	return 'SIGSTOP of the dlock run holding its lease and of the set workers of c1';
};
# the postmaster's children must all end on their own: a backend left
# behind keeps the node's shared memory, and Patroni cannot start the node
# again (FaultCluster::start gives every process /dev/null as its standard
# input for that).  Those still there after 10 s are counted, for a
# verdict, and killed so that the run goes on.
my %left_after_kill;    # label => processes a killed postmaster left
$nemesis{'kill9-postmaster'} = sub {
	my ($p) = @_;
	my @pids = $c->postgres_pids($p);
	kill 'KILL', shift @pids;
	my @left = @pids;
	for (1 .. 40) { @left = grep { alive($_) } @left; last unless @left; sleep 0.25 }
	$left_after_kill{ $load{label} } += @left;
	kill 'KILL', @left;
	return "kill -9 of $p\'s postmaster; " . (@left ? scalar(@left) . ' of its processes still there after 10 s' : 'its processes ended on their own');
};

# alive - a process that has not exited (a zombie has)
sub alive
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my $line = <$fh> // return 0;
	return $line !~ /^\d+ \(.*\) Z /;
}
$nemesis{'kill9-node'} = sub {
	my ($p) = @_;
	my @pids = $c->postgres_pids($p);
	$c->kill9("patroni-$p");
	kill 'KILL', @pids;
	push @after, sub { $c->start_node($p) };
	return "kill -9 of $p\'s Patroni and PostgreSQL (restarted after the hold)";
};
$nemesis{'clock-offset-failover'} = sub {
	my ($p) = @_;
	my @set = map { my $o = sprintf('%+.2f', rand(2) - 1); $c->clock($_, $o); "$_ $o s" } @FaultCluster::NODES;
	sleep 1.5;
	kill 'KILL', $c->postmaster_pid($p);
	return 'clocks ' . join(', ', @set) . ", then kill -9 of $p\'s postmaster";
};
$nemesis{'clock-drift'} = sub {
	my @set;
	for my $node (@FaultCluster::NODES)
	{
		my $rate = 1 + (rand(1) - 0.5) / 100;    # within 0.5 %
		$c->clock($node, drift_spec($node, $rate));
		push @set, sprintf('%s x%.4f', $node, $rate);
	}
	return 'clocks drifting: ' . join(', ', @set);
};
# outside what dlock promises: run for the figures
$nemesis{'clock-jump-ahead'} = sub {
	my ($p) = @_;
	$c->clock($p, '+4');
	return "$p\'s clock 4 s ahead (leases end early on it; dlock run's margin is 0.6 s)";
};
$nemesis{'clock-behind-failover'} = sub {
	my ($p) = @_;
	$c->clock($_, '-60') for others($p);
	sleep 1.5;
	kill 'KILL', $c->postmaster_pid($p);
	return "the standbys' clocks 60 s behind, then kill -9 of $p\'s postmaster";
};
my %outside = ('clock-jump-ahead' => 'a server clock stepped ahead past dlock run\'s margin',
	'clock-behind-failover' => 'a promoted standby\'s clock behind the old primary\'s by more than the failover took');
my %hold = ('clock-drift' => 30, 'partition-primary-renew' => 26);
my @alone = qw(partition-primary partition-primary-renew partition-majority partition-client oneway-primary-out oneway-client-in
  loss delay slow-network pause-postmaster pause-primary pause-client kill9-postmaster kill9-node
  clock-offset-failover clock-drift clock-jump-ahead clock-behind-failover);
my %network = map { $_ => 1 } qw(partition-primary partition-majority partition-client oneway-primary-out oneway-client-in
  loss delay slow-network);

# drift_spec - libfaketime's rate counts from the postmaster's start (its
# children inherit that start): the offset cancels what the rate would add
# for the time already run, so the clock drifts from now on without a step
sub drift_spec
{
	my ($node, $rate) = @_;
	my $pm = $c->postmaster_pid($node) // return '+0';
	my @l = eval { lines_of("$work/$node/data/postmaster.pid") } or return '+0';
	my $start = $l[2] // time;
	return sprintf('%+.3f x%.5f', -($rate - 1) * (time - $start), $rate);
}

# ---- a segment: the workload across a plan of faults, then the checks ----
sub settings_text
{
	my ($sync) = @_;
	my %s = FaultCluster::patroni_settings();
	return sprintf('synchronous_mode %s, synchronous_mode_strict %s, failsafe_mode %s, ttl %d, loop_wait %d, '
		  . 'retry_timeout %d, maximum_lag_on_failover %d', $sync ? 'on' : 'off', $sync ? 'on' : 'off',
		$s{failsafe_mode}, @s{qw(ttl loop_wait retry_timeout maximum_lag_on_failover)});
}

sub segment
{
	my ($label, $sync, @plan) = @_;    # plan: [ [nemesis...], hold ] ...
	$c->healthy(180, $sync);
	start_load($label);
	# for check.pl, which checks a kept segment again
	open my $mf, '>', "$load{dir}/mode" or die "mode: $!";
	print $mf $sync ? "sync\n" : "async\n";
	close $mf;
	wait_ticking(4);
	my ($fault_at, @did);
	my $k = 0;
	for my $step (@plan)
	{
		my ($names, $hold) = @$step;
		my $p = $c->leader // $FaultCluster::NODES[0];
		$fault_at //= time;
		my $at = time - $fault_at;
		$k++;
		my $i = 0;
		for my $name (@$names)
		{
			nemesis_record("nemesis.$k." . ++$i, 'invoke', $name);
			my $what = $nemesis{$name}->($p);
			push @did, sprintf('%.0f s: %s (%s, %.0f s)', $at, $name, $what, $hold);
			note "$label: $did[-1]";
		}
		wait_ticking($hold);
		$c->heal;
		$_->() for splice @after;
		$i = 0;
		nemesis_record("nemesis.$k." . ++$i, 'ok', $_) for @$names;
		my $t = time;
		my $until = time + 150;
		my $ok = 0;
		while (!$ok && time < $until) { tick(); $ok = eval { $c->healthy(1, $sync) }; sleep 0.5 unless $ok }
		note sprintf('%s: healed; %s after %.1f s: %s', $label, $ok ? 'whole again' : 'NOT whole', time - $t, $c->describe);
		wait_ticking(2);
	}
	wait_ticking(3);
	stop_load();
	return check_segment($label, $sync, $fault_at, \@plan, \@did);
}

# nemesis_record - the nemeses go into the segment's history, as the
# clients' operations do (client.c's line format): invoke when the fault
# begins, ok when it is healed
sub nemesis_record
{
	my ($proc, $type, $name) = @_;
	open my $fh, '>>', "$load{dir}/nemesis.hist" or die "nemesis.hist: $!";
	printf $fh "%.6f %.6f %s %s %s - - - - -\n", time, Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()),
	  $proc, $type, $name;
	close $fh;
}

sub check_segment
{
	my ($label, $sync, $fault_at, $plan, $did) = @_;
	my $l = $c->leader;
	$c->poll_until('a leader to read from', 60, sub { $l = $c->leader }) unless $l;
	my $rows_text = $c->psql($c->conninfo($l), "SELECT elem, name, token, id FROM fault_set WHERE elem LIKE '$label.%'
		UNION ALL SELECT elem, name, token, id FROM fault_child WHERE elem LIKE '$label.%'");
	open my $fh, '>', "$load{dir}/rows.txt" or die $!;
	print $fh "$rows_text\n";
	close $fh;
	my @rows = map { [ split /\|/ ] } grep { length } split /\n/, $rows_text;
	my $ops = FaultHistory::read_ops($load{dir});
	my %exit = map { $_->{proc} => $_->{exit} } @{ $load{runs} };
	# a run lost its lease when its messages say so, or it exited 79
	my @lost_runs = grep { defined $_->{lost} || ($exit{ $_->{proc} } // '') eq '79' } @{ FaultHistory::runs($ops) };
	my $r = FaultHistory::check(ops => $ops, rows => \@rows, fault_at => $fault_at, runs => \@lost_runs);
	my %names = map { $_ => 1 } map { @{ $_->[0] } } @$plan;
	my @outside = grep { $outside{$_} } sort keys %names;
	my $async_only_outside = grep { $_ eq 'clock-behind-failover' } @outside;
	my $within = !@outside;
	my $tokens_within = $sync || !$async_only_outside;
	my $gaps_within = !grep { $_ eq 'clock-jump-ahead' } @outside;
	@$r{qw(sync settings plan runs_total runs_lost)} = ($sync, settings_text($sync), $did,
		scalar @{ $load{runs} }, scalar @lost_runs);
	$r->{steps} = FaultHistory::per_step($ops, $r) if @$plan > 1;
	$figures{$label} = $r;
	push @labels, $label;

	# a dlock run that was itself paused cannot stop its child in time (its
	# child writes on, and the fence refuses it): its gap is a figure
	my @g = grep { defined $_->{gap} && $_->{outside} !~ /pause-client/ } @{ $r->{gaps} };
	my @g_paused = grep { defined $_->{gap} && $_->{outside} =~ /pause-client/ } @{ $r->{gaps} };
	note sprintf('%s: dlock run %s, paused itself, stopped its child %.2f s after the name was granted again (a figure)',
		$label, $_->{proc}, -$_->{gap}) for grep { $_->{gap} < 0 } @g_paused;
	my $min_gap = @g ? min(map { $_->{gap} } @g) : undef;
	# the expiry gaps that dlock run's own timekeeping answers for, and
	# those of runs that lived through a clock fault or a pause of dlock run
	my @eg = grep { defined $_->{expiry_gap} && !$_->{outside} } @{ $r->{gaps} };
	my @eg_out = grep { defined $_->{expiry_gap} && $_->{outside} } @{ $r->{gaps} };
	$r->{min_expiry_gap} = @eg ? min(map { $_->{expiry_gap} } @eg) : undef;
	note sprintf('%s: dlock run %s: child stopped %s before the expiry of its last renew on the server%s', $label,
		$_->{proc}, sprintf('%.3f s', $_->{expiry_gap}), $_->{outside} ? " (during $_->{outside}: a figure)" : '')
	  for @eg, @eg_out;
	note sprintf('%s (%s): %d operations, %d acknowledged writes, %d lost, %d refused by the fence, %d unknown, '
		  . 'failover %s, longest pause in writes %.1f s, two primaries took writes for %.1f s, '
		  . '%d dlock run lost its lease, gap from child stop to regrant %s; epochs: %s',
		$label, $sync ? 'sync' : 'async', @$r{qw(operations acknowledged lost refused unknown)},
		defined $r->{failover} ? sprintf('%.1f s', $r->{failover}) : '-', $r->{longest_pause}, $r->{two_primaries},
		scalar @lost_runs, @g ? join(', ', map { sprintf('%.2f s', $_->{gap}) } @g) : '-',
		join(' ', map { "$_->{name}\[" . ($_->{min_token} // '-') . '..' . ($_->{max_token} // '-') . ']' } @{ $r->{epochs} }));

	ok($r->{acknowledged} > 0, "$label: the workload had writes acknowledged");
	if (exists $left_after_kill{$label})
	{
		is($left_after_kill{$label}, 0, "$label: every process of a postmaster killed with -9 ended on its own");
	}
	if (@eg)
	{
		cmp_ok($r->{min_expiry_gap}, '>=', 0, sprintf('%s: every dlock run that lost its lease stopped its child before '
			  . 'the expiry of its last renew on the server (%d runs, the least by %.3f s)', $label, scalar @eg, $r->{min_expiry_gap}))
		  or diag explain [ map { { proc => $_->{proc}, token => $_->{token}, stop => $_->{stop}, expires => $_->{expires},
			  renews => $_->{renews} } } grep { $_->{expiry_gap} < 0 } @eg ];
	}
	is($r->{phantom}, 0, "$label: no element whose write failed is present")
	  or diag explain [ map { $_->{elem} } @{ $r->{phantom_list} } ];
	is(scalar(grep { /^\S+: \d+ after/ } @{ $r->{order_list} }), 0, "$label: each name's rows are in token order in the table")
	  or diag join "\n", @{ $r->{order_list} }[ 0 .. min(9, $#{ $r->{order_list} }) ];
	if ($sync)
	{
		is($r->{lost}, 0, "$label: every acknowledged element is present (synchronous mode)")
		  or diag join "\n", map { "$_->{elem} $_->{name} $_->{token} $_->{node}" } @{ $r->{lost_list} }[ 0 .. min(9, $r->{lost} - 1) ];
		is($r->{stale}, 0, "$label: no write committed under a superseded token")
		  or diag join "\n", map { "$_->{write}{elem} token $_->{write}{token} sent at $_->{write}{inv_wall} after "
			  . "$_->{grant}{name} went to $_->{grant}{token} at $_->{grant}{end_wall}" } @{ $r->{stale_list} }[ 0 .. min(9, $r->{stale} - 1) ];
		is($r->{order}, 0, "$label: each name's acknowledged writes are in token order")
		  or diag join "\n", @{ $r->{order_list} }[ 0 .. min(9, $r->{order} - 1) ];
	}
	if ($tokens_within)
	{
		is($r->{token_order}, 0, "$label: every epoch's tokens are above every earlier epoch's")
		  or diag join "\n", @{ $r->{token_order_list} };
	}
	else
	{
		note sprintf('%s: outside the clock provision (%s): %d epoch pairs with tokens out of order%s', $label,
			join('; ', map { $outside{$_} } @outside), $r->{token_order},
			$r->{token_order} ? ': ' . join('; ', @{ $r->{token_order_list} }) : '');
	}
	if (@g && $gaps_within && $sync)
	{
		cmp_ok($min_gap, '>=', 0, sprintf('%s: dlock run stopped its child %.2f s or more before the name was granted again', $label, $min_gap))
		  or diag explain [ map { { proc => $_->{proc}, token => $_->{token}, stop => $_->{stop}, grant_at => $_->{grant_at},
			  gap => $_->{gap}, grant_node => $_->{grant_node} } } @{ $r->{gaps} } ];
	}
	elsif (@g)
	{
		note sprintf('%s: dlock run gaps %s (%s)', $label, join(', ', map { sprintf('%.2f s', $_->{gap}) } @g),
			$gaps_within ? 'asynchronous mode: an acknowledged renewal may be lost' : 'outside the provision');
	}
	return $r;
}

sub keep_history
{
	my $keep = $ENV{FAULTS_KEEP} // "/tmp/dlock-faults-failed-$seed";
	make_path($keep);
	system('cp', '-a', "$work/hist", "$work/logs", $keep);
	for my $node (@FaultCluster::NODES) { copy("$work/$node/patroni.yml", "$keep/$node.yml") }
	diag "the history of this failing run is kept in $keep (seed $seed): FAULTS_SEED=$seed repeats the "
	  . "schedules; perl -Itest/faults test/faults/check.pl $keep/hist/LABEL checks a segment again";
}

my @only = $ENV{FAULTS_ONLY} ? split(/,/, $ENV{FAULTS_ONLY}) : ();

# the five families a random schedule draws from, one step of each first
my %family = (
	(map { $_ => 'partitions' } qw(partition-primary partition-primary-renew partition-majority partition-client
	  oneway-primary-out oneway-client-in)),
	(map { $_ => 'delay and loss' } qw(loss delay slow-network)),
	(map { $_ => 'pauses' } qw(pause-postmaster pause-primary pause-client)),
	(map { $_ => 'clocks' } qw(clock-offset-failover clock-drift clock-jump-ahead clock-behind-failover)),
	(map { $_ => 'kill -9' } qw(kill9-postmaster kill9-node)));
die "nemesis $_ has no family" for grep { !$family{$_} } keys %nemesis;

# random_plan - seeded: steps of one nemesis, or two at once (a network
# fault with a pause or a clock), a step of each family first (in a
# random order), then any, until MINUTES are planned.  Not drawn: the
# faults outside what dlock promises, the timed partition (it needs a
# 30 s ttl), and pause-primary unless FAULTS_ONLY names it (after it
# Patroni 3.0 may name no synchronous standby again: see the HA guide)
sub random_plan
{
	my ($minutes, $allowed) = @_;
	my @pool = grep { !$outside{$_} && $_ ne 'partition-primary-renew' && ($_ ne 'pause-primary' || @only) } @$allowed;
	my %by_family;
	push @{ $by_family{ $family{$_} } }, $_ for @pool;
	my @order = shuffle(map { my $f = $by_family{$_}; $f->[ int(rand(@$f)) ] } sort keys %by_family);
	my @plan;
	my $planned = 0;
	while ($planned < $minutes * 60 || (@order && @plan < keys %by_family))
	{
		@order = shuffle(@pool) unless @order;
		my @step = (shift @order);
		if (rand() < 0.35)
		{
			my @other = grep { $network{ $step[0] } xor $network{$_} } grep { !/kill9|failover/ } @pool;
			push @step, $other[ int(rand(@other)) ] if @other && $step[0] !~ /kill9|failover/;
		}
		my $hold = 5 + int(rand(16));
		push @plan, [ \@step, $hold ];
		# the hold, then the heal and the way back: 3 to 20 s, 8 s on
		# average in the runs so far
		$planned += $hold + 10;
	}
	return @plan;
}

# ---- the schedules ----
my @modes = map { $_ eq 'sync' ? 1 : 0 } split /,/, ($ENV{FAULTS_MODES} // 'sync,async');

# random_segments - one seeded schedule of MINUTES, drawn once from the
# nemeses (FAULTS_ONLY's, or all within what dlock promises), run in each
# mode
sub random_segments
{
	my ($minutes) = @_;
	my @plan = random_plan($minutes, @only ? \@only : \@alone);
	note "schedule (seed $seed): " . join(', ', map { join('+', @{ $_->[0] }) . " $_->[1] s" } @plan);
	for my $mode (@modes)
	{
		$c->set_mode($mode);
		segment(($mode ? 'random-sync' : 'random-async') . "-s$seed", $mode, @plan);
	}
}

if ($ENV{FAULTS_MINUTES})
{
	random_segments($ENV{FAULTS_MINUTES});
}
else
{
	my @names = @only ? @only : @alone;
	for my $mode (@modes)
	{
		$c->set_mode($mode);
		for my $name (@names)
		{
			my $label = ($mode ? 'sync' : 'async') . "-$name";
			# Patroni 3.0 names no synchronous standby again after its
			# loop was stuck on a paused primary (the HA guide's "Faults
			# beyond crashes"), and no later segment could start
			if ($mode && $name eq 'pause-primary' && !$ENV{FAULTS_ONLY})
			{
				note "$label: not run alone (Patroni 3.0 leaves the cluster without a synchronous standby after it)";
				next;
			}
			$opts{$label}{run_ttl} = '30s' if $name eq 'partition-primary-renew';
			segment($label, $mode, [ [$name], $hold{$name} // 15 ]);
		}
	}
	my $minutes = $ENV{FAULTS_RANDOM_MINUTES} // (@only ? 0 : 5);
	random_segments($minutes) if $minutes > 0;
}

# ---- the tables, as the documentation shows them ----
note '';
note '| nemesis | mode | operations | acknowledged | lost | stale writes refused | unknown | failover | '
  . 'two primaries | dlock run lost / min gap to regrant / min gap to expiry |';
for my $label (@labels)
{
	my $r = $figures{$label};
	# a paused dlock run's gap is a figure of its own (check_segment)
	my @g = grep { defined $_->{gap} && $_->{outside} !~ /pause-client/ } @{ $r->{gaps} };
	my @g_paused = grep { defined $_->{gap} && $_->{outside} =~ /pause-client/ } @{ $r->{gaps} };
	note sprintf('| %s | %s | %d | %d | %d | %d | %d | %s | %.1f s | %d / %s%s / %s |',
		$label, $r->{sync} ? 'sync' : 'async',
		@$r{qw(operations acknowledged lost refused unknown)},
		defined $r->{failover} ? sprintf('%.1f s', $r->{failover}) : '-', $r->{two_primaries},
		$r->{runs_lost}, @g ? sprintf('%.2f s', min(map { $_->{gap} } @g)) : '-',
		@g_paused ? sprintf(' (paused itself: %.2f s)', min(map { $_->{gap} } @g_paused)) : '',
		defined $r->{min_expiry_gap} ? sprintf('%.2f s', $r->{min_expiry_gap}) : '-');
	# a schedule's steps: each from its fault to the next step's
	my $k = 0;
	for my $st (@{ $r->{steps} // [] })
	{
		note sprintf('| %s step %d: %s | %s | %d | %d | %d | %d | %d | %s | | |', $label, ++$k, join('+', @{ $st->{names} }),
			$r->{sync} ? 'sync' : 'async', @$st{qw(operations acknowledged lost refused unknown)},
			defined $st->{failover} ? sprintf('%.1f s', $st->{failover}) : '-');
	}
}
note 'Patroni: ' . settings_text(1) . ' (asynchronous rows: synchronous_mode off)';
note sprintf('test-faults ran %.0f s', time - $started);
done_testing();
