# Behind a real transaction pooler: Debian's pgbouncer in transaction mode,
# with a pool of 2 server connections for 6 clients, in front of a cluster
# with dlock preloaded.
#
# Clients that poll try_acquire(..., queue => true), fence a write and
# release, in a loop, hold a server connection only for each call: every
# client keeps being granted, in arrival order (between two grants of one
# client, no other client is granted twice), no release returns false,
# every acknowledged write lands, and tokens increase in commit order.
# The same clients waiting in blocking acquire() through the same pool
# hold the server connections while they wait: the figure shows what that
# does (the holder's release queues in pgbouncer behind the waiters until
# the lease expires).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($pgbouncer) = grep { -x } ('/usr/sbin/pgbouncer', map { "$_/pgbouncer" } split /:/, $ENV{PATH});
plan skip_all => 'pgbouncer is not installed' unless $pgbouncer;

my $node = PostgreSQL::Test::Cluster->new('pooler');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\nmax_connections = 40\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION dlock;
	CREATE TABLE pool_log (id bigserial PRIMARY KEY, run text, client int, token bigint,
	                       arrived_us bigint, at timestamptz DEFAULT clock_timestamp());
	CREATE TABLE pool_releases (run text, client int, token bigint, released boolean);
});

#
# pgbouncer, as this (unprivileged) user, on 127.0.0.1, stopped by its pid
#
my $dir = $node->basedir . '/pgbouncer';
mkdir $dir;
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $user = getpwuid($<);
open my $ini, '>', "$dir/pgbouncer.ini" or die $!;
print $ini <<"EOF";
[databases]
app = host=@{[ $node->host ]} port=@{[ $node->port ]} dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 2
max_client_conn = 100
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
EOF
close $ini;
open my $users, '>', "$dir/userlist.txt" or die $!;
print $users qq{"$user" ""\n};
close $users;
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '>', "$dir/stdout", '2>', "$dir/stderr");
# Stopped however the test ends, also when a check dies half-way
END
{
	local $?;
	if ($bouncer && $bouncer->pumpable)
	{
		$bouncer->signal('INT');
		eval { $bouncer->finish; 1 } or $bouncer->kill_kill;
	}
}
my $pooled = "host=127.0.0.1 port=$port dbname=app";
my $up = 0;
for (1 .. 100)
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-At', '-d', $pooled, '-c', 'SELECT 1' ], '>', \$out, '2>', \$err);
	if ($out =~ /^1/) { $up = 1; last; }
	sleep 0.1;
}
ok($up, 'pgbouncer accepts connections, in transaction mode with a pool of 2') or BAIL_OUT(`cat $dir/pgbouncer.log`);

# pgbench_run(label, script): 6 clients through pgbouncer for 6 s
sub pgbench_run
{
	my ($label, $script) = @_;
	my $file = "$dir/$label.sql";
	open my $f, '>', $file or die $!;
	print $f $script;
	close $f;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pgbench', '-n', '-M', 'simple', '-c', 6, '-j', 2, '-T', 6, '-D', 'waiting=0',
			'-h', '127.0.0.1', '-p', $port, '-f', $file, 'app' ], '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

#
# Polling with queue => true
#
my ($rc, $out, $err) = pgbench_run('queue', <<'EOF');
SELECT coalesce(l.token, 0) AS token, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS polled_us
  FROM (SELECT) one LEFT JOIN dlock.try_acquire('pool', '5s', 'c' || :client_id, queue => true) l ON true \gset
\if :waiting = 0
\set arrived :polled_us
\set waiting 1
\endif
\if :token
INSERT INTO pool_log (run, client, token, arrived_us)
  SELECT 'queue', :client_id, :token, :arrived WHERE dlock.fence('pool', :token);
SELECT dlock.release('pool', 'c' || :client_id)::int AS released \gset
INSERT INTO pool_releases VALUES ('queue', :client_id, :token, :released = 1);
\set waiting 0
\else
\sleep 5 ms
\endif
EOF
is($rc, 0, 'queue => true: pgbench ran without errors') or diag $err;

my ($grants, $clients, $false_releases, $seconds) = split /\|/, $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM pool_log WHERE run = 'queue'),
	       (SELECT count(DISTINCT client) FROM pool_log WHERE run = 'queue'),
	       (SELECT count(*) FROM pool_releases WHERE run = 'queue' AND NOT released),
	       (SELECT extract(epoch FROM max(at) - min(at)) FROM pool_log WHERE run = 'queue')});
is($clients, 6, 'every one of the 6 clients was granted');
is($false_releases, 0, 'no release returned false');
is($node->safe_psql('postgres', q{SELECT (SELECT count(*) FROM pool_releases WHERE run = 'queue')
		- (SELECT count(*) FROM pool_log WHERE run = 'queue')}),
	'0', 'every grant\'s fenced write landed');
is($node->safe_psql('postgres', q{SELECT count(*) FROM (SELECT token <= lag(token) OVER (ORDER BY id) AS bad
		FROM pool_log WHERE run = 'queue') s WHERE bad}),
	'0', 'tokens increase in commit order');

# Arrival order: each grant went to the client whose wait began first (its
# first poll of that wait took its place).  The place is taken inside the
# poll and the time read right after it, so arrivals closer together than
# that are not told apart: 0.5 ms of slack.
my @arrived = split /\n/, $node->safe_psql('postgres',
	q{SELECT arrived_us FROM pool_log WHERE run = 'queue' ORDER BY id});
my ($out_of_order, $latest) = (0, 0);
for my $a (@arrived)
{
	$out_of_order++ if $a < $latest - 500;
	$latest = $a if $a > $latest;
}
is($out_of_order, 0, 'grants follow arrival order: no client was granted before one whose wait began earlier');
my $worst = $node->safe_psql('postgres', q{SELECT round(max(gap) * 1000) FROM (
	SELECT extract(epoch FROM at - lag(at) OVER (PARTITION BY client ORDER BY id)) AS gap
	  FROM pool_log WHERE run = 'queue') s});
note sprintf('queue => true through a pool of 2: %d cycles in %.1f s (%.0f/s), worst wait of a client between its grants %d ms',
	$grants, $seconds, $grants / ($seconds || 1), $worst);

#
# Blocking acquire() through the same pool, for comparison
#
($rc, $out, $err) = pgbench_run('blocking', <<'EOF');
SELECT token FROM dlock.acquire('pool2', '2s', 'c' || :client_id) \gset
INSERT INTO pool_log (run, client, token) SELECT 'blocking', :client_id, :token WHERE dlock.fence('pool2', :token);
SELECT dlock.release('pool2', 'c' || :client_id)::int AS released \gset
INSERT INTO pool_releases VALUES ('blocking', :client_id, :token, :released = 1);
EOF
my ($bgrants, $bfalse) = split /\|/, $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM pool_releases WHERE run = 'blocking'),
	       (SELECT count(*) FROM pool_releases WHERE run = 'blocking' AND NOT released)});
note sprintf('blocking acquire() through the same pool: %d cycles in 6 s, %d of them with a release that returned false (the lease had expired while the release queued in pgbouncer)',
	$bgrants, $bfalse);
is($node->safe_psql('postgres', q{SELECT count(*) FROM pool_releases r
		WHERE run = 'blocking' AND released AND NOT EXISTS
		  (SELECT FROM pool_log l WHERE l.run = 'blocking' AND l.token = r.token)}),
	'0', 'blocking: every released grant\'s fenced write landed too');

#
# The dlock command through the pool: dlock run --poll
#
my $dlock = $ENV{DLOCK_CLI} // "$ENV{TESTDIR}/cli/dlock";
SKIP:
{
	skip 'the dlock command is not built', 4 unless -x $dlock;
	$node->safe_psql('postgres', q{SELECT dlock.acquire('pool:cli', '1h', 'holder')});
	my ($cout, $cerr) = ('', '');
	IPC::Run::run([ $dlock, 'run', 'pool:cli', '-d', $pooled, '--wait', '1s', '--poll', '50ms',
			'--', 'true' ], '>', \$cout, '2>', \$cerr);
	is($? >> 8, 75, 'dlock run --poll: busy until --wait ran out, exit 75');
	my @runs;
	for my $i (1 .. 2)
	{
		my ($o, $e) = ('', '');
		push @runs, [ IPC::Run::start([ $dlock, 'run', 'pool:cli', '-d', $pooled, '--wait', '30s',
				'--poll', '50ms', '--', 'sh', '-c', 'echo "$DLOCK_TOKEN"' ], '>', \$o, '2>', \$e), \$o ];
	}
	sleep 0.5;
	my ($sout, $serr) = ('', '');
	eval {
		IPC::Run::run([ 'psql', '-X', '-At', '-d', $pooled, '-c', 'SELECT 41 + 1' ],
			'>', \$sout, '2>', \$serr, IPC::Run::timeout(10));
	};
	is($sout, "42\n", 'while two dlock run --poll wait, other queries get through the pool of 2');
	is($node->safe_psql('postgres', q{SELECT dlock.release('pool:cli', 'holder')}), 't', 'the holder releases');
	my $ran = 0;
	for my $r (@runs)
	{
		$r->[0]->finish;
		$ran++ if $? == 0 && ${ $r->[1] } =~ /^\d+$/;
	}
	is($ran, 2, 'both are granted in turn and run their command with its token');
}

$bouncer->signal('INT');
$bouncer->finish;
undef $bouncer;
$node->stop;
done_testing();
