# dlock under Patroni (Debian's patroni 3.0): a single-node etcd and three
# Patroni nodes, PostgreSQL 15 with dlock in shared_preload_libraries, all
# on 127.0.0.1.
#
# A lock-guarded workload (test/ha/patroni/workload.c) connects through a
# multi-host conninfo with target_session_attrs=read-write and reconnects on
# errors; it acquires, writes under dlock.fence() and releases, while
# "keepers" take a new one-hour lease each time and never release; every
# acknowledged grant and write is logged with the port of the server that
# answered.  Four rounds: a switchover (patronictl switchover) and a kill -9
# of the leader's postmaster (primary_start_timeout 0, so Patroni fails over
# rather than restarting it), first with synchronous_mode and
# synchronous_mode_strict on, then with synchronous mode off.
#
# After each round, on the new leader:
#  - synchronous mode: no acknowledged fenced write is missing, every
#    acknowledged keeper's grant is live with its owner and token and
#    fences true, three leases taken at the start keep owner and token;
#  - asynchronous mode: the acknowledged grants that are not there (lost)
#    fence false, also after the new leader granted the names again;
#  - both: every token the new leader issued is larger than every token any
#    client was given before (lost ones included), and so is the next one.
# Last, two failovers one after the other with synchronous mode off: the
# leader's node lost, then the new leader's before the third node streamed
# from it; the third, promoted on the same timeline number, gives none of
# the second's tokens again and they fence false.
# A "dlock run" with the multi-host URI keeps its child writing under the
# fence across both rounds of each mode (or, with synchronous mode off,
# stops it with status 79 when its lease was lost, as documented), and a
# "dlock run --wait" started while the leader is gone starts its command on
# the new leader.
#
# Run by test/ha/patroni/run.sh (make test-ha) as an unprivileged user:
# initdb refuses root.  PG_BINDIR names the server's bin directory,
# DLOCK_CLI the dlock command, HA_WORKLOAD the compiled workload; PATRONI,
# PATRONICTL and ETCD the programs when they are not on the PATH.
# DlockHA.pm (test/perl) must be on the module path.

use strict;
use warnings FATAL => 'all';

use File::Temp qw(tempdir);
use IPC::Run;
use List::Util qw(max min);
use Test::More;
use Time::HiRes qw(time sleep);

use DlockHA qw(free_port poll_until lines_of postmaster_pid etcd_command etcd_healthy patroni_yaml);

my $started = time;
# A signal ends the test through the END block, which stops what it started
$SIG{$_} = sub { die "terminated by SIG$_[0]\n" } for qw(INT TERM HUP);
my $bindir = $ENV{PG_BINDIR} or die 'PG_BINDIR is not set';
my $dlock = $ENV{DLOCK_CLI} or die 'DLOCK_CLI is not set';
my $workload = $ENV{HA_WORKLOAD} or die 'HA_WORKLOAD is not set';
my $patroni = $ENV{PATRONI} // 'patroni';
my $patronictl = $ENV{PATRONICTL} // 'patronictl';
my $etcd = $ENV{ETCD} // 'etcd';
my $base = tempdir('dlock-patroni-XXXXXX', TMPDIR => 1, CLEANUP => 1);
mkdir "$base/logs";
delete $ENV{$_} for qw(PGHOST PGPORT PGDATABASE PGUSER PGSERVICE PGDATA PGTARGETSESSIONATTRS);
$ENV{PATH} = "$bindir:$ENV{PATH}";
my $user = getpwuid($<);

sub psql { return DlockHA::psql($bindir, @_) }

# Every service runs in the foreground under us and is stopped by its pid
my $procs = DlockHA::Procs->new(logdir => "$base/logs");
sub run_service { my ($name, @cmd) = @_; $procs->start($name, [@cmd]) }
sub stop_service { my ($name) = @_; $procs->stop($name, 60) }
my @runs;    # dlock run harnesses still running
END
{
	for my $h (@runs) { eval { $h->signal('TERM') if $h->pumpable; $h->finish if $h->pumpable; 1 } or eval { $h->kill_kill(grace => 5) } }
	stop_service($_) for grep { /^node/ } $procs->names;
	stop_service($_) for $procs->names;
}

# ---- etcd and three Patroni nodes ----
my ($etcd_client, $etcd_peer) = (free_port(), free_port());
run_service('etcd', etcd_command($etcd, name => 'dlock-ha', data_dir => "$base/etcd",
	client_port => $etcd_client, peer_port => $etcd_peer));
poll_until('etcd answers', 30, sub { etcd_healthy("127.0.0.1:$etcd_client") });

# Patroni's settings: a leader key of 10 s checked every second, so that a
# crash is noticed at once; primary_start_timeout 0, so that a crashed
# leader is failed over from rather than restarted; a
# maximum_lag_on_failover of 16 MB, so that the second of replication lag
# the crash round makes does not keep the standbys from being promoted;
# dlock in shared_preload_libraries under postgresql.parameters.
my @nodes = qw(node1 node2 node3);
my (%pgport, %apiport);
for my $node (@nodes)
{
	($pgport{$node}, $apiport{$node}) = (free_port(), free_port());
	my $yml = patroni_yaml(scope => 'dlock-ha', namespace => '/dlock/', name => $node,
		api => "127.0.0.1:$apiport{$node}", etcd => "127.0.0.1:$etcd_client",
		dcs => [ ttl => 10, loop_wait => 1, retry_timeout => 3, maximum_lag_on_failover => 16777216,
			primary_start_timeout => 0, synchronous_mode => 'true', synchronous_mode_strict => 'true' ],
		parameters => [ max_connections => 60 ],
		listen => "127.0.0.1:$pgport{$node}", data_dir => "$base/$node", bin_dir => $bindir,
		pgpass => "$base/$node.pgpass", superuser => $user, rewind => undef, socket_dir => $base,
		network => '127.0.0.1/32');
	open my $fh, '>', "$base/$node.yml" or die $!;
	print $fh $yml;
	close $fh;
}
run_service($_, $patroni, "$base/$_.yml") for @nodes;

my $cluster = DlockHA::Patroni->new(nodes => \@nodes, conninfo => \&conninfo, psql => \&psql,
	api => { map { $_ => "127.0.0.1:$apiport{$_}" } @nodes });
sub members { return $cluster->members }
sub describe { return $cluster->describe }
# leader - the node whose PostgreSQL is the running, writable leader
sub leader { return $cluster->leader }
sub replicas_streaming { my ($n) = @_; return $cluster->replicas_streaming == $n }
sub conninfo { return "host=127.0.0.1 port=$pgport{$_[0]} dbname=postgres connect_timeout=5" }
sub patronictl
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $patronictl, '-c', "$base/node1.yml", @args ], '>', \$out, '2>', \$err);
	die "patronictl @args failed:\n$out$err" if $?;
	return $out;
}

my $t_boot = time;
poll_until('a leader and two replicas', 180, sub { leader() && replicas_streaming(2) });
poll_until('a synchronous standby', 60, sub { grep { $_->{role} eq 'sync_standby' } values %{ members() } });
note sprintf('cluster up after %.1f s: %s', time - $t_boot, describe());

my $uri = 'postgresql://' . join(',', map { "127.0.0.1:$pgport{$_}" } @nodes)
  . '/postgres?target_session_attrs=read-write&connect_timeout=2';
note "the multi-host URI: $uri";
my $l0 = leader();
is(psql(conninfo($_), 'SHOW shared_preload_libraries'), 'dlock', "$_ has dlock in shared_preload_libraries")
  for @nodes;
like(psql(conninfo($l0), 'SHOW synchronous_standby_names'), qr/\S/,
	'synchronous_mode: the leader names a synchronous standby');
psql($uri, q{CREATE EXTENSION dlock;
	CREATE TABLE ha_writes (run text, worker int, seq bigint, name text, token bigint,
	                        PRIMARY KEY (run, worker, seq));
	CREATE TABLE ha_child (job text, n int, token bigint, PRIMARY KEY (job, n))});

# Leases taken before everything, held through all rounds
my %long;
for my $i (1 .. 3)
{
	my $token = psql($uri, "SELECT token FROM dlock.acquire('long:$i', '1h', 'keeper-$i')");
	$long{"long:$i"} = "keeper-$i $token";
}
like(join(' ', values %long), qr/^(keeper-\d \d+ ?){3}$/, 'three long-lived leases granted');

# Every token any client was given so far, with the port that gave it
my @given;
push @given, map { [ (split / /, $long{$_})[1], $pgport{$l0}, $_, (split / /, $long{$_})[0] ] } keys %long;

# start_job - dlock run whose child writes under the fence every 100 ms
# through the same URI and logs each acknowledged write
sub start_job
{
	my ($job) = @_;
	my $log = "$base/$job.acked";
	my $child = q{i=0; while [ $i -lt 100000 ]; do i=$((i+1)); }
	  . q{r=$(psql -X -q -At -d "$APP" -c "INSERT INTO ha_child SELECT '$DLOCK_NAME', $i, $DLOCK_TOKEN WHERE dlock.fence('$DLOCK_NAME', $DLOCK_TOKEN) RETURNING n" 2>/dev/null) && [ "$r" = "$i" ] && echo "$i $DLOCK_TOKEN" >> }
	  . $log . q{; sleep 0.1; done};
	local $ENV{APP} = $uri;
	my %job = (name => $job, log => $log, err => "$base/logs/$job.err");
	$job{h} = IPC::Run::start([ $dlock, 'run', $job, '-d', $uri, '--ttl', '30s', '--wait', '20s',
		'--kill-after', '2s', '-v', '--', 'sh', '-c', $child ], '>', "$base/logs/$job.out", '2>', $job{err});
	push @runs, $job{h};
	eval { poll_until("$job starts its child", 30, sub { -s $log }); 1 }
	  or BAIL_OUT("dlock run did not start its child: $@\n" . `cat $job{err}`);
	return \%job;
}
sub job_ticks { return scalar lines_of($_[0]{log}) }

# start_waiting_run - a dlock run --wait started while there may be no
# leader; its command records the token it was given
sub start_waiting_run
{
	my ($name) = @_;
	my %w = (file => "$base/$name.token");
	$w{h} = IPC::Run::start([ $dlock, 'run', $name, '-d', $uri, '--ttl', '30s', '--wait', '60s', '-v',
		'--', 'sh', '-c', qq{echo "\$DLOCK_TOKEN" > $w{file}} ], '>', \$w{out}, '2>', \$w{err});
	push @runs, $w{h};
	return \%w;
}

# in_values - a VALUES list of (name, token) pairs for SQL
sub in_values { return join ",\n", map { "('$_->[0]', $_->[1])" } @_ }

# round - run the workload across a failover done by $act, then check
my %figures;
sub round
{
	my ($label, $sync, $act) = @_;
	my $old = leader() or die 'no leader';
	my $out = "$base/$label.out";
	my $w = IPC::Run::start([ $workload, $uri, $label, 6, 2, 20 ], '>', $out, '2>', "$base/logs/$label.err");
	push @runs, $w;
	sleep 4;
	my $t0 = time;
	my $waiting = $act->($label, $old);
	my $new;
	poll_until("$label: a new leader", 120, sub { $new = leader(); $new && $new ne $old });
	my $took = time - $t0;
	my $new_port = $pgport{$new};
	# let the workload write under the new leader's tokens for a while
	my $new_writes = sub { scalar grep { /^write .* $new_port \S+$/ } lines_of($out) };
	eval { poll_until("$label: writes on the new leader", 60, sub { $new_writes->() >= 200 }) };
	sleep 1;
	$w->signal('TERM');
	$w->finish;
	is($?, 0, "$label: the workload ran through (it reconnects on errors)");

	my (@grants, @keeps, @writes, @times);
	for (lines_of($out))
	{
		my @f = split / /;
		if ($f[0] eq 'grant')
		{
			push @grants, [ $f[4], $f[5], $f[2], $f[3] ];
			push @keeps, [ @f[ 2, 3, 4 ] ] if $f[1] eq 'keep';
		}
		elsif ($f[0] eq 'write')
		{
			push @writes, [ @f[ 1 .. 6 ] ];
			push @times, $f[7];
		}
	}
	@times = sort { $a <=> $b } @times;
	my $gap = max(0, map { $times[$_] - $times[ $_ - 1 ] } 1 .. $#times);
	my @after = map { $_->[0] } grep { $_->[1] == $new_port } @grants;
	my @before = (map({ $_->[0] } @given), map { $_->[0] } grep { $_->[1] != $new_port } @grants);
	push @given, @grants;

	my $c = conninfo($new);
	my $present_writes = psql($c, "SELECT count(*) FROM ha_writes WHERE run = '$label'");
	my %present = map { $_ => 1 } split /\n/,
	  psql($c, "SELECT concat_ws(' ', run, worker, seq, name, token) FROM ha_writes WHERE run = '$label'");
	my @missing = grep { !$present{ join ' ', @$_[ 0 .. 4 ] } } @writes;
	my %live = map { $_ => 1 } split /\n/,
	  psql($c, "SELECT concat_ws(' ', name, owner, token) FROM dlock.leases WHERE name LIKE 'keep:$label:%' AND state = 'live'");
	my @lost = grep { !$live{"@$_"} } @keeps;
	my @kept = grep { $live{"@$_"} } @keeps;

	$figures{$label} = {
		took => $took, writes => scalar @writes, missing => scalar @missing, gap => $gap,
		grants => scalar @grants, keeps => scalar @keeps, lost => scalar @lost,
	};
	note sprintf('%s: %s -> %s, new leader after %.1f s; %d acknowledged grants (%d by keepers, %d of those lost), '
		  . '%d acknowledged fenced writes (%d missing), longest time without an acknowledged write %.1f s; %s',
		$label, $old, $new, $took, scalar @grants, scalar @keeps, scalar @lost, scalar @writes,
		scalar @missing, $gap, describe());
	ok(@writes > 50, "$label: the workload wrote acknowledged fenced rows");
	ok(@after > 0, "$label: and was granted tokens by the new leader");

	if ($sync)
	{
		is(scalar(@missing), 0, "$label: no acknowledged fenced write is missing on the new leader")
		  or diag 'missing: ' . join(', ', map { "@$_" } @missing[ 0 .. min(9, $#missing) ]);
		is(scalar(@lost), 0, sprintf('%s: all %d acknowledged keeper grants are live on the new leader with owner and token',
			$label, scalar @keeps))
		  or diag 'lost: ' . join(', ', map { "@$_" } @lost[ 0 .. min(9, $#lost) ]);
	}
	if (@kept)
	{
		# In batches, each its own transaction: every true fence pins its
		# token until the end of the transaction, one lock-table entry each
		my $false = 0;
		for (my $i = 0; $i < @kept; $i += 500)
		{
			my @batch = @kept[ $i .. min($i + 499, $#kept) ];
			my $n = psql($c, 'SELECT count(*) FROM (VALUES ' . in_values(map { [ $_->[0], $_->[2] ] } @batch)
				  . ') v(name, token) WHERE NOT dlock.fence(name, token)');
			$false += ($n eq '' ? scalar(@batch) : $n);
		}
		is($false, 0, sprintf('%s: the %d live keeper tokens fence true on the new leader', $label, scalar @kept));
	}
	if (!$sync && @lost)
	{
		# the lost names are granted again by the new leader before their
		# old tokens are tried: a reissued token would fence true
		psql($c, join '', map { "SELECT dlock.acquire('$_->[0]', '1h', 'again');\n" } @lost);
		is(psql($c, 'SELECT count(*) FROM (VALUES ' . in_values(map { [ $_->[0], $_->[2] ] } @lost)
			  . ') v(name, token) WHERE dlock.fence(name, token)'),
			'0', sprintf('%s: the %d lost keeper grants fence false on the new leader, also once their names are granted again',
			$label, scalar @lost));
	}
	ok(@lost > 0, "$label: the crash lost acknowledged grants (the standbys lagged)")
	  if !$sync && $label =~ /crash/;
	for my $name (sort keys %long)
	{
		is(psql($c, "SELECT owner || ' ' || token FROM dlock.leases WHERE name = '$name' AND state = 'live'"),
			$long{$name}, "$label: $name is held by its owner with its token");
	}

	my ($min_after, $max_before) = (min(@after) // 0, max(@before));
	cmp_ok($min_after, '>', $max_before,
		"$label: every token the new leader issued ($min_after and up) is larger than every token given before ($max_before)");
	my $next = psql($c, "SELECT token FROM dlock.acquire('after:$label', '1min')");
	cmp_ok($next, '>', max(map { $_->[0] } @given), "$label: so is the next token ($next)");
	push @given, [ $next, $new_port, "after:$label", '' ];

	# no name's token was given to two owners (a reissued token would be)
	my (%owners, @twice);
	$owners{"$_->[2] $_->[0]"}{ $_->[3] } = 1 for @given;
	@twice = grep { keys %{ $owners{$_} } > 1 } sort keys %owners;
	is(scalar(@twice), 0, "$label: no name's token was given to two owners")
	  or diag 'given twice: ' . join(', ', map { "$_ to " . join('/', sort keys %{ $owners{$_} }) } @twice[ 0 .. min(9, $#twice) ]);

	if ($waiting)
	{
		$waiting->{h}->finish;
		my ($token) = lines_of($waiting->{file});
		is($? >> 8, 0, "$label: dlock run --wait, started with no leader, ran its command") or diag $waiting->{err};
		cmp_ok($token // 0, '>', $max_before, "$label: under a token of the new leader ($token)");
	}
	return $new;
}

# crash - kill -9 of the leader's postmaster, its walsenders stopped for a
# second before (a replication lag of that second, as a loaded network or
# standby would make): with synchronous mode off, what the leader
# acknowledged in it is lost.  A walsender killed while stopped may hold
# SyncRepLock, and the backends that wait for that lock do not notice the
# postmaster's death: they would keep the node's shared memory, and Patroni
# could not start it again.  So whatever of the node is still there 1 s
# after the crash gets kill -9 too, as a machine's crash would end it.
sub crash
{
	my ($label, $old) = @_;
	my @walsenders = split /\n/, psql(conninfo($old), 'SELECT pid FROM pg_stat_replication');
	my $pid = postmaster_pid("$base/$old");
	my @node = DlockHA::child_pids($pid);
	note "$label: walsenders (@walsenders) stopped for 1 s, then kill -9 of $old\'s postmaster ($pid)";
	kill 'STOP', @walsenders;
	sleep 1;
	kill 'KILL', $pid or die "kill $pid: $!";
	kill 'KILL', @walsenders;
	sleep 1;
	my @left = grep { kill 0, $_ } @node;
	note "$label: kill -9 of the " . scalar(@left) . " processes of $old still there 1 s later (@left)" if @left;
	kill 'KILL', @left;
	return start_waiting_run("wait:$label");
}
sub switchover
{
	my ($label, $old) = @_;
	patronictl('switchover', '--leader', $old, '--force', 'dlock-ha');
	return undef;
}
sub rejoined
{
	my ($what) = @_;
	poll_until("$what: three members again", 180, sub { leader() && replicas_streaming(2) });
	note "$what: " . describe();
}

# check_job - dlock run kept its child writing under the fence
sub check_job
{
	my ($job, $label) = @_;
	ok($job->{h}->pumpable, "$label: dlock run still runs its child") or diag `cat $job->{err}`;
	my $before = job_ticks($job);
	eval { poll_until('the child writes', 15, sub { job_ticks($job) > $before + 3 }) };
	cmp_ok(job_ticks($job), '>', $before, "$label: and the child goes on writing under the fence");
}

# ---- synchronous_mode: true, synchronous_mode_strict: true ----
my $job = start_job('job:sync');
round('sync-switchover', 1, \&switchover);
check_job($job, 'sync-switchover');
rejoined('after the switchover');
round('sync-crash', 1, \&crash);
check_job($job, 'sync-crash');
$job->{h}->signal('TERM');
$job->{h}->finish;
my @acked = lines_of($job->{log});
my %child_rows = map { $_ => 1 } split /\n/, psql($uri, q{SELECT n || ' ' || token FROM ha_child WHERE job = 'job:sync'});
is(scalar(grep { !$child_rows{$_} } @acked), 0,
	sprintf('synchronous mode: all %d acknowledged writes of the dlock run child are on the leader', scalar @acked));
is(scalar(keys %{ { map { (split / /)[1] => 1 } @acked } }), 1, 'and were all made under one token');
rejoined('after the crash');

# ---- synchronous mode off ----
patronictl('edit-config', '--force', '-q', '-s', 'synchronous_mode=false', '-s', 'synchronous_mode_strict=false', 'dlock-ha');
poll_until('the leader drops its synchronous standby', 60,
	sub { my $l = leader(); $l && psql(conninfo($l), 'SHOW synchronous_standby_names') eq '' });
is(psql(conninfo(leader()), 'SHOW synchronous_standby_names'), '', 'synchronous mode off: no synchronous standby');
$job = start_job('job:async');
round('async-switchover', 0, \&switchover);
check_job($job, 'async-switchover');
rejoined('after the switchover');
round('async-crash', 0, \&crash);
if ($job->{h}->pumpable)
{
	check_job($job, 'async-crash');
}
else
{
	$job->{h}->finish;
	is($? >> 8, 79, 'async-crash: dlock run lost its lease and stopped its child with status 79');
}
$job->{h}->kill_kill(grace => 5) if $job->{h}->pumpable;

# ---- two failovers one after the other (synchronous mode off) ----
# The leader's node is lost whole (Patroni and PostgreSQL killed) while the
# third node's Patroni is paused, so that only the second is promoted and
# the third streams from nobody; the second grants and is lost in turn
# before the third ever streamed from it.  With no WAL archive the third
# picks the second's timeline number.  Its tokens must still be above the
# second's, none given twice, and the second's holders fence false.
sub lose_node
{
	my ($node) = @_;
	my $pid = postmaster_pid("$base/$node");
	$procs->kill9($node);
	kill 'KILL', $pid or die "kill $pid: $!";
}
rejoined('after the async crash');
my $d0 = leader();
my ($d1, $d2) = grep { $_ ne $d0 } @nodes;
$procs->signal($d2, 'STOP');
lose_node($d0);
poll_until("double: $d1 leads", 120, sub { my $l = leader(); $l && $l eq $d1 });
my $c1 = conninfo($d1);
my $tl1 = psql($c1, 'CHECKPOINT; SELECT timeline_id FROM pg_control_checkpoint()');
my @second;
for my $i (1 .. 20)
{
	my $token = psql($c1, "SELECT token FROM dlock.acquire('double:$i', '1h', 'second-$i')");
	push @second, [ "double:$i", $token, "second-$i" ];
}
is(scalar(grep { $_->[1] =~ /^\d+$/ } @second), 20, "double: $d1, the first new leader, granted 20 names");
push @given, map { [ $_->[1], $pgport{$d1}, $_->[0], $_->[2] ] } @second;
lose_node($d1);
$procs->signal($d2, 'CONT');
poll_until("double: $d2 leads", 180, sub { my $l = leader(); $l && $l eq $d2 });
my $c2 = conninfo($d2);
is(psql($c2, 'CHECKPOINT; SELECT timeline_id FROM pg_control_checkpoint()'), $tl1,
	"double: $d2, promoted next, picked the same timeline number as $d1 ($tl1)");
is(psql($c2, 'SELECT count(*) FROM (VALUES ' . in_values(map { [ $_->[0], $_->[1] ] } @second)
	  . ') v(name, token) WHERE dlock.fence(name, token)'),
	'0', "double: $d1\'s holders fence false on $d2");
my @third = map { [ "double:$_", psql($c2, "SELECT dlock.force_release('double:$_'); SELECT token FROM dlock.acquire('double:$_', '1h', 'third-$_')") =~ s/.*\n//sr, "third-$_" ] } 1 .. 20;
push @given, map { [ $_->[1], $pgport{$d2}, $_->[0], $_->[2] ] } @third;
is(psql($c2, 'SELECT count(*) FROM (VALUES ' . in_values(map { [ $_->[0], $_->[1] ] } @second)
	  . ') v(name, token) WHERE dlock.fence(name, token)'),
	'0', "double: and still false once $d2 granted the same names again");
cmp_ok(min(map { $_->[1] } @third), '>', max(map { $_->[1] } @second),
	"double: every token of $d2 is above every token of $d1");
my (%double_owners, @double_twice);
$double_owners{"$_->[2] $_->[0]"}{ $_->[3] } = 1 for @given;
@double_twice = grep { keys %{ $double_owners{$_} } > 1 } sort keys %double_owners;
is(scalar(@double_twice), 0, 'double: no name\'s token was given to two owners')
  or diag 'given twice: ' . join(', ', @double_twice[ 0 .. min(9, $#double_twice) ]);

stop_service($_) for grep { $procs->pid_of($_) } @nodes;
stop_service('etcd');
note '| round | new leader after | acknowledged grants | keeper grants lost | acknowledged fenced writes | missing | longest pause in acknowledged writes |';
for my $label (qw(sync-switchover sync-crash async-switchover async-crash))
{
	my $f = $figures{$label} or next;
	note sprintf('| %s | %.1f s | %d | %d of %d | %d | %d | %.1f s |', $label, $f->{took}, $f->{grants},
		$f->{lost}, $f->{keeps}, $f->{writes}, $f->{missing}, $f->{gap});
}
note sprintf('the Patroni suite took %.0f s', time - $started);
done_testing();
