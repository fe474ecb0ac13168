# dlock under a real HA manager: pg_auto_failover 2.0 (Debian's
# postgresql-15-auto-failover), a monitor and two data nodes on 127.0.0.1.
#
# dlock is created on the primary.  A lock-guarded workload
# (test/ha/ha_workload.c) connects through the multi-host conninfo that
# pg_autoctl gives (target_session_attrs=read-write) and reconnects on
# errors; a few long-lived leases are held across everything; one
# "dlock run" has a child that writes under the fence.  Then a graceful
# switchover (pg_autoctl perform failover) and, separately, a crash of the
# primary (pg_autoctl stop --immediate).  After each, on the new primary:
# every acknowledged grant of a long-lived lease is there with its owner and
# token, the next token is larger than every acknowledged one, no
# acknowledged fenced write is missing, and (after the switchover) dlock run
# still runs its child.
#
# Run by test/ha/run.sh (make test-ha) as an unprivileged user: pg_autoctl
# refuses root.  PG_BINDIR names the server's bin directory, DLOCK_CLI the
# dlock command, HA_WORKLOAD the compiled workload; DlockHA.pm (test/perl)
# must be on the module path.

use strict;
use warnings FATAL => 'all';

use File::Temp qw(tempdir);
use IPC::Run;
use Test::More;
use Time::HiRes qw(time sleep);

use DlockHA qw(free_port lines_of poll_until);

my $bindir = $ENV{PG_BINDIR} or die 'PG_BINDIR is not set';
my $autoctl = $ENV{PG_AUTOCTL} // 'pg_autoctl';
my $dlock = $ENV{DLOCK_CLI} or die 'DLOCK_CLI is not set';
my $workload = $ENV{HA_WORKLOAD} or die 'HA_WORKLOAD is not set';
my $base = tempdir('dlock-ha-XXXXXX', TMPDIR => 1, CLEANUP => 1);

# pg_autoctl keeps its configuration and state under the XDG directories
$ENV{XDG_CONFIG_HOME} = "$base/config";
$ENV{XDG_DATA_HOME} = "$base/share";
$ENV{XDG_RUNTIME_DIR} = "$base/run";
mkdir $_ for map { "$base/$_" } qw(config share run logs);
chmod 0700, "$base/run";
delete $ENV{$_} for qw(PGHOST PGPORT PGDATABASE PGUSER PGSERVICE PGDATA);
$ENV{PATH} = "$bindir:$ENV{PATH}";

sub psql { return DlockHA::psql($bindir, @_) }

sub autoctl
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $autoctl, @args ], '>', \$out, '2>', \$err);
	die "pg_autoctl @args failed:\n$out$err" if $?;
	return $out;
}

# Each pg_autoctl service runs in the foreground under us, stopped by pid
my $procs = DlockHA::Procs->new(logdir => "$base/logs");
sub run_service
{
	my ($name, $pgdata) = @_;
	$procs->start($name, [ $autoctl, 'run', '--pgdata', $pgdata ]);
}
sub stop_service { my ($name) = @_; $procs->stop($name, 60) }
END
{
	stop_service($_) for $procs->names;
}

my $pm = free_port();
my $monitor = "host=127.0.0.1 port=$pm dbname=pg_auto_failover user=autoctl_node";
my $monitor_uri = "postgres://autoctl_node\@127.0.0.1:$pm/pg_auto_failover?sslmode=disable";

note 'a monitor and two data nodes';
autoctl('create', 'monitor', '--pgdata', "$base/monitor", '--pgport', $pm,
	'--hostname', '127.0.0.1', '--listen', '127.0.0.1', '--auth', 'trust', '--no-ssl',
	'--pgctl', "$bindir/pg_ctl");
run_service('monitor', "$base/monitor");
poll_until('the monitor answers', 60, sub { (psql($monitor, 'SELECT 1'))[1] eq '1' });

# Quicker failure detection than the defaults (5 s checks, 20 s before a
# node counts as unhealthy), so that the crash test fits in CI
my $monitor_admin = "host=127.0.0.1 port=$pm dbname=pg_auto_failover user=" . getpwuid($<);
for my $setting ('health_check_period = 1000', 'health_check_timeout = 1000',
	'health_check_max_retries = 1', 'health_check_retry_delay = 500',
	'node_considered_unhealthy_timeout = 4000', 'primary_demote_timeout = 10000')
{
	my ($ok, $out, $err) = psql($monitor_admin, "ALTER SYSTEM SET pgautofailover.$setting");
	die "ALTER SYSTEM SET pgautofailover.$setting: $err" unless $ok;
}
psql($monitor_admin, 'SELECT pg_reload_conf()');

my %port;
for my $node (qw(node1 node2))
{
	$port{$node} = free_port();
	autoctl('create', 'postgres', '--pgdata', "$base/$node", '--pgport', $port{$node},
		'--hostname', '127.0.0.1', '--listen', '127.0.0.1', '--name', $node,
		'--auth', 'trust', '--no-ssl',
		'--pgctl', "$bindir/pg_ctl", '--monitor', $monitor_uri, '--dbname', 'app');
	run_service($node, "$base/$node");
	poll_until("$node joins", 180, sub {
		psql($monitor, "SELECT reportedstate FROM pgautofailover.node WHERE nodename = '$node'")
		  =~ /^(primary|secondary|single|wait_primary)$/
	});
}

sub states
{
	return scalar psql($monitor, q{SELECT string_agg(nodename || ':' || reportedstate || '/' || goalstate, ' '
		ORDER BY nodename) FROM pgautofailover.node});
}
sub primary
{
	my $name = psql($monitor, q{SELECT nodename FROM pgautofailover.node
		WHERE reportedstate = goalstate AND reportedstate IN ('primary', 'wait_primary')});
	return $name;
}
poll_until('a primary and a secondary', 180, sub { states() eq 'node1:primary/primary node2:secondary/secondary' });
note 'formation: ' . states();
note 'number_sync_standbys: ' . psql($monitor, q{SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = 'default'})
  . '; replication quorum: ' . psql($monitor, q{SELECT string_agg(nodename || '=' || replicationquorum, ' ' ORDER BY nodename) FROM pgautofailover.node});

my $uri = autoctl('show', 'uri', '--formation', 'default', '--monitor', $monitor_uri);
chomp $uri;
note "the formation's URI: $uri";
like($uri, qr/target_session_attrs=read-write/, 'pg_autoctl gives a multi-host URI for the primary');
my $app = $uri;

sub node_conninfo { return "host=127.0.0.1 port=$port{$_[0]} dbname=app" }
my $p = primary();
like(psql(node_conninfo($p), 'SHOW synchronous_standby_names'), qr/pgautofailover_standby_/,
	'the primary keeps its standby synchronous');
psql($app, q{CREATE EXTENSION dlock;
	CREATE TABLE ha_writes (run text, worker int, seq bigint, name text, token bigint,
	                        PRIMARY KEY (run, worker, seq));
	CREATE TABLE ha_child (n int PRIMARY KEY, token bigint)});

# Long-lived leases, acknowledged before anything happens
my %long;
for my $i (1 .. 3)
{
	my $token = psql($app, "SELECT token FROM dlock.acquire('long:$i', '1h', 'keeper-$i')");
	like($token, qr/^\d+$/, "long-lived lease long:$i granted");
	$long{"long:$i"} = "keeper-$i $token";
}

# dlock run with a child that writes under the fence, every 100 ms, through
# the same URI, retrying on errors; it logs each acknowledged write
my $child_log = "$base/child.log";
my $child = q{i=0; while [ $i -lt 100000 ]; do i=$((i+1)); }
  . q{r=$(psql -X -q -At -d "$APP" -c "INSERT INTO ha_child SELECT $i, $DLOCK_TOKEN WHERE dlock.fence('$DLOCK_NAME', $DLOCK_TOKEN) RETURNING n || ' ' || inet_server_port() || ' ' || to_char(clock_timestamp(), 'HH24:MI:SS.MS')" 2>/dev/null) && [ "${r%% *}" = "$i" ] && echo "$r" >> } . $child_log . q{; sleep 0.1; done};
my $run = do
{
	local $ENV{APP} = $app;
	IPC::Run::start([ $dlock, 'run', 'ha:job', '-d', $app, '--ttl', '30s', '--wait', '10s',
		'--kill-after', '2s', '-v', '--', 'sh', '-c', $child ],
		'>', "$base/logs/run.out", '2>', "$base/logs/run.err");
};
eval { poll_until('dlock run starts its child', 30, sub { -s $child_log }); 1 }
  or BAIL_OUT("dlock run did not start its child: $@\n" . `cat $base/logs/run.err`);

# failover_round - run the workload across a failover done by $act, then check
sub failover_round
{
	my ($label, $act) = @_;
	my $acked_before = psql($app, 'SELECT last_value FROM dlock.token_seq');
	my ($wout, $werr) = ('', '');
	my $w = IPC::Run::start([ $workload, $app, $label, 8, 40, 20 ], '>', \$wout, '2>', \$werr);
	sleep 5;
	my $old = primary();
	my $t0 = time;
	note sprintf('%s: acting on %s at %s (server clock)', $label, $old,
		scalar psql($monitor, q{SELECT to_char(clock_timestamp(), 'HH24:MI:SS.MS')}));
	$act->($old);
	poll_until("$label: a new primary", 120, sub { my $n = primary(); $n && $n ne $old });
	my $new = primary();
	my $first_after = psql(node_conninfo($new), 'SELECT last_value FROM dlock.token_seq');
	note sprintf('%s: %s -> %s, new primary after %.1f s; states %s', $label, $old, $new,
		time() - $t0, states());
	$w->finish;
	is($?, 0, "$label: the workload ran through (it reconnects on errors)") or diag $werr;

	my (@writes, @times, $max_token, $gap);
	$max_token = 0;
	for (split /\n/, $wout)
	{
		if (/^grant (\S+) (\S+) (\d+)$/) { $max_token = $3 if $3 > $max_token; }
		elsif (/^write (\S+) (\d+) (\d+) (\d+) ([\d.]+)$/) { push @writes, "$1|$2|$3|$4"; push @times, $5; }
	}
	# Unavailability: the longest time without any acknowledged fenced write
	@times = sort { $a <=> $b } @times;
	$gap = 0;
	for my $i (1 .. $#times) { $gap = $times[$i] - $times[$i - 1] if $times[$i] - $times[$i - 1] > $gap; }
	note sprintf('%s: %d acknowledged fenced writes, largest acknowledged token %d, longest time without an acknowledged write %.1f s',
		$label, scalar(@writes), $max_token, $gap);
	ok(@writes > 50, "$label: the workload wrote acknowledged fenced rows");
	ok((grep { (split /\|/)[3] > $first_after } @writes) > 0,
		"$label: also under tokens granted by the new primary");

	# Every acknowledged write is on the new primary
	my %present = map { $_ => 1 } split /\n/,
	  psql(node_conninfo($new), "SELECT concat_ws('|', run, worker, seq, token) FROM ha_writes");
	my @missing = grep { !$present{$_} } @writes;
	is(scalar(@missing), 0, "$label: no acknowledged fenced write is missing on the new primary")
	  or diag "missing: @missing[0 .. ($#missing < 9 ? $#missing : 9)]";

	# Every long-lived lease, same owner and token
	for my $name (sort keys %long)
	{
		is(psql(node_conninfo($new), "SELECT owner || ' ' || token FROM dlock.leases WHERE name = '$name' AND state = 'live'"),
			$long{$name}, "$label: $name is held by its owner with its token");
	}

	# Tokens go on growing
	my $next = psql(node_conninfo($new), "SELECT token FROM dlock.acquire('after:$label', '1min')");
	cmp_ok($next, '>', $max_token, "$label: the next token ($next) is larger than every acknowledged one ($max_token)");
	cmp_ok($next, '>', $acked_before, "$label: and than the counter before the round");
	return $new;
}

note 'graceful switchover: pg_autoctl perform failover';
failover_round('switchover', sub {
	autoctl('perform', 'failover', '--formation', 'default', '--monitor', $monitor_uri, '--wait', '120');
});
poll_until('the old primary is back as a secondary', 180,
	sub { states() =~ /:primary\/primary/ && states() =~ /:secondary\/secondary/ });
note 'formation: ' . states();

ok($run->pumpable, 'dlock run still runs its child after the switchover');
my $ticks_before = () = lines_of($child_log);
sleep 2;
my $ticks_after = () = lines_of($child_log);
cmp_ok($ticks_after, '>', $ticks_before, 'and the child goes on writing under the fence');
is(psql($app, q{SELECT count(*) FROM ha_child c JOIN dlock.leases l ON l.name = 'ha:job'
		WHERE c.token <> l.token OR l.state <> 'live'}), '0',
	'every fenced write of the child carries the live token of its lease');

note 'crash of the primary: pg_autoctl stop --immediate';
my $crashed;
failover_round('crash', sub {
	my ($old) = @_;
	$crashed = $old;
	autoctl('stop', '--pgdata', "$base/$old", '--immediate');
	eval { stop_service($old) };
});
my $alone = primary();
is(psql($monitor, "SELECT reportedstate FROM pgautofailover.node WHERE nodename = '$alone'"),
	'wait_primary', 'alone, the new primary is in wait_primary');
is(psql(node_conninfo($alone), 'SHOW synchronous_standby_names'), '',
	'and commits without waiting for a standby');

# The child of dlock run: its acknowledged writes are all there
$run->signal('TERM');
$run->finish;
# (each line of the child's log: n, the port of the server that acknowledged
# the write, and when)
my @acked_lines = lines_of($child_log);
my %child_rows = map { $_ => 1 } split /\n/, psql(node_conninfo($alone), 'SELECT n FROM ha_child');
my @child_missing = grep { !$child_rows{ (split / /)[0] } } @acked_lines;
is(scalar(@child_missing), 0,
	sprintf('all %d acknowledged writes of the dlock run child are on the last primary', scalar @acked_lines))
  or diag sprintf("missing (n, port, time): %s ... %s; ports: %s",
	$child_missing[0], $child_missing[-1], join(' ', map { "$_=$port{$_}" } sort keys %port));

# Bring the crashed node back: it rejoins as a secondary
run_service($crashed, "$base/$crashed");
poll_until('the crashed node rejoins', 180, sub { states() =~ /secondary\/secondary/ });
note 'formation: ' . states();

stop_service($_) for qw(node1 node2 monitor);
done_testing();
