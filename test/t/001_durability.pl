# Leases and tokens survive restart, crash recovery and dump/restore; on a
# hot standby, lease changes are refused with 25006 while reads work.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
# Keep asynchronous commits in WAL buffers long enough for the crash below
$node->append_conf('postgresql.conf', qq(
wal_writer_delay = 10s
wal_writer_flush_after = 0
autovacuum = off
));
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub max_token
{
	my ($n, $db) = @_;
	return $n->safe_psql($db // 'postgres',
		'SELECT coalesce(max(token), 0) FROM dlock.lease_state');
}

sub grant_token
{
	my ($n, $name, $owner, $db) = @_;
	return $n->safe_psql($db // 'postgres',
		"SELECT token FROM dlock.try_acquire('$name', '1h', '$owner')");
}

# Some history: grants, renewals, releases, a force_release
$node->safe_psql('postgres', q{
	SELECT dlock.try_acquire('job:' || g, '1h', 'w' || g) FROM generate_series(1, 20) g;
	SELECT dlock.renew('job:' || g, 'w' || g, '2h') FROM generate_series(1, 10) g;
	SELECT dlock.release('job:' || g, 'w' || g) FROM generate_series(11, 15) g;
	SELECT dlock.force_release('job:16');
});
my $state_sql = q{SELECT name, token, owner, holder_role, acquired_at, expires_at, ended_at, end_reason
	FROM dlock.lease_state ORDER BY name};
my $before = $node->safe_psql('postgres', $state_sql);

note 'clean restart';
$node->restart;
is($node->safe_psql('postgres', $state_sql), $before, 'leases unchanged by a restart');
my $max = max_token($node);
cmp_ok(grant_token($node, 'job:11', 'after-restart'), '>', $max,
	'first grant after a restart has a larger token');

note 'crash recovery';
$before = $node->safe_psql('postgres', $state_sql);
$max = max_token($node);
# A grant made with synchronous_commit = off is flushed all the same; an
# ordinary asynchronous commit made after it may be lost in the crash.
$node->safe_psql('postgres', 'CREATE TABLE async_probe (x int)');
my $async_token = $node->safe_psql('postgres', q{
	SET synchronous_commit = off;
	SELECT token FROM dlock.try_acquire('job:async', '1h', 'async');
	INSERT INTO async_probe VALUES (1);
});
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', "$state_sql") =~ /job:async\|$async_token\|async\|/ ? 1 : 0,
	1, 'a grant made with synchronous_commit = off survives a crash');
note 'asynchronous control commit '
  . ($node->safe_psql('postgres', 'SELECT count(*) FROM async_probe') eq '0'
	? 'was lost in the crash, as expected'
	: 'happened to reach disk before the crash');
my $after = $node->safe_psql('postgres',
	"SELECT name, token, owner, holder_role, acquired_at, expires_at, ended_at, end_reason
	   FROM dlock.lease_state WHERE name <> 'job:async' ORDER BY name");
is($after, $before, 'every committed lease is there after crash recovery');
my $next = grant_token($node, 'job:12', 'after-crash');
cmp_ok($next, '>', $async_token, 'first grant after a crash has a larger token');

note 'crash in the middle of a grant';
$max = max_token($node);
my $bg = $node->background_psql('postgres');
$bg->query_safe(q{BEGIN; SELECT dlock.try_acquire('job:inflight', '1h', 'inflight')});
$node->stop('immediate');
$bg->quit;
$node->start;
is($node->safe_psql('postgres', "SELECT count(*) FROM dlock.lease_state WHERE name = 'job:inflight'"),
	'0', 'an uncommitted grant is gone after a crash');
cmp_ok(grant_token($node, 'job:inflight', 'retry'), '>', $max,
	'tokens keep growing past the uncommitted grant');

note 'dump and restore';
$node->safe_psql('postgres', q{SELECT dlock.try_acquire('job:live', '1 day', 'live-owner')});
$before = $node->safe_psql('postgres', $state_sql);
$max = max_token($node);
my $dump = $node->basedir . '/dlock.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ],
	'pg_dump of a database with leases');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('restored'), $dump ],
	'pg_restore into a new database');
is($node->safe_psql('restored', $state_sql), $before, 'leases come along with the dump');
is($node->safe_psql('restored', q{SELECT owner, state FROM dlock.leases WHERE name = 'job:live'}),
	'live-owner|live', 'a live lease is still held by its owner after the restore');
cmp_ok(grant_token($node, 'job:13', 'restored', 'restored'), '>', $max,
	'first grant after a restore has a larger token than every token before');

note 'hot standby';
$node->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
$node->safe_psql('postgres', q{SELECT dlock.try_acquire('job:standby', '1h', 'primary-owner')});
$node->wait_for_catchup($standby);

my $standby_token = $standby->safe_psql('postgres',
	q{SELECT token FROM dlock.leases WHERE name = 'job:standby' AND state = 'live'});
is($standby_token,
	$node->safe_psql('postgres', q{SELECT token FROM dlock.leases WHERE name = 'job:standby'}),
	'the view reads on a standby');
is($standby->safe_psql('postgres', "SELECT dlock.fence('job:standby', $standby_token)"),
	't', 'fence works on a standby');

foreach my $call (
	q{dlock.acquire('job:standby', '1h', 'x')},
	q{dlock.try_acquire('job:new', '1h', 'x')},
	q{dlock.renew('job:standby', 'primary-owner', '1h')},
	q{dlock.release('job:standby', 'primary-owner')},
	q{dlock.force_release('job:standby')})
{
	my ($stdout, $stderr);
	$standby->psql('postgres', "\\set VERBOSITY verbose\nSELECT $call",
		stdout => \$stdout, stderr => \$stderr);
	like($stderr, qr/ERROR:  25006: cannot change leases during recovery/,
		"$call raises 25006 on a standby");
	like($stderr, qr/HINT:  Call dlock\.\w+\(\) on the primary server/,
		"$call hints at the primary");
}

$standby->stop;
$node->stop;
done_testing();
