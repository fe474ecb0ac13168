# Streaming replication and failover.  With a synchronous standby, a grant
# acknowledged by the primary is on the standby (even when the client asked
# for synchronous_commit = off), and after promotion the lease is held by the
# same owner with the same token, and the next grant is larger.  With
# asynchronous replication, an acknowledged grant can be lost in a failover,
# and its token is never issued again (test/t/020_timelines.pl has every such case).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest qw(sync_pair background_query);

note 'synchronous replication, remote_apply';
my ($primary, $standby) = sync_pair('primary', 'standby1', synchronous_commit => 'remote_apply');

my $lease = $primary->safe_psql('postgres',
	q{SELECT owner || ' ' || token FROM dlock.acquire('job', '1h', 'worker-1')});
is($standby->safe_psql('postgres',
	q{SELECT owner || ' ' || token FROM dlock.leases WHERE name = 'job' AND state = 'live'}),
	$lease, 'an acknowledged grant is on the synchronous standby at once');

# A client that turns synchronous_commit off still gets a grant that is on
# the standby when acknowledged: dlock raises the setting for the grant's
# commit.  With the standby down, that commit waits; an ordinary commit with
# synchronous_commit = off does not.
$standby->stop;
my $bg = background_query($primary, q{SET synchronous_commit = off;
SELECT 'granted-' || owner FROM dlock.acquire('job2', '1h', 'worker-2');});
ok($primary->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'}),
	'with synchronous_commit = off, a grant still waits for the synchronous standby');
# (a commit that waited for the stopped standby would not return: psql times out)
my $probe_rc = $primary->psql('postgres', 'SET synchronous_commit = off; CREATE TABLE probe ()',
	timeout => 10, timed_out => \my $probe_timed_out);
ok(!$probe_timed_out && defined $probe_rc && $probe_rc == 0,
	'an ordinary commit with synchronous_commit = off does not wait');
is($primary->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'}),
	'1', 'meanwhile the grant still waits: the standby was down during that commit');
$standby->start;
like($bg->query_until(qr/granted-worker-2/, ''), qr/granted-worker-2/,
	'the grant is acknowledged once the standby has it');
$bg->quit;
$standby->poll_query_until('postgres',
	q{SELECT owner = 'worker-2' FROM dlock.leases WHERE name = 'job2'})
  or die 'grant not on the standby';
is($primary->safe_psql('postgres', q{SET synchronous_commit = off;
	SELECT dlock.release('job2', 'worker-2'); SHOW synchronous_commit}),
	"t\noff", 'the caller\'s own setting is left as it was');

my ($stdout, $stderr);
$standby->psql('postgres', q{SELECT dlock.acquire('job', '1h', 'x')},
	stdout => \$stdout, stderr => \$stderr);
like($stderr, qr/cannot change leases during recovery/, 'the standby refuses grants');

# A set granted on the primary is on the standby whole, under one token
my $set = $primary->safe_psql('postgres',
	q{SELECT count(*) || ' ' || min(token) || ' ' || max(token)
	    FROM dlock.acquire_all(ARRAY['acct:77', 'acct:78'], '1h', 'mover')});
my ($set_count, $set_token, $set_max) = split / /, $set;
is("$set_count $set_max", "2 $set_token", 'a set of two names is granted under one token');
is($standby->safe_psql('postgres', qq{SELECT count(*) FROM dlock.leases
	WHERE name IN ('acct:77', 'acct:78') AND token = $set_token AND state = 'live'}),
	'2', 'the acknowledged set is on the synchronous standby, whole');

# dlock.watch() works on the standby: it reads the replayed lease (polling,
# since no commit there wakes it) and sees a release made on the primary
my $standby_watch = background_query($standby,
	qq{SELECT 'watched-' || coalesce(dlock.watch('acct:77', $set_token, '30s')::text, 'none');});
$primary->safe_psql('postgres', q{SELECT dlock.release_all(ARRAY['acct:77'], 'mover')});
like($standby_watch->query_until(qr/watched-/, ''), qr/watched-none/,
	'a watch on the standby returns once the release is replayed');
$standby_watch->quit;
is($standby->safe_psql('postgres', q{SELECT dlock.watch('acct:78', NULL, '0')}), $set_token,
	'and reports the live token of the rest of the set');

my $max_before = $primary->safe_psql('postgres', 'SELECT max(token) FROM dlock.lease_state');
$primary->stop('immediate');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'promotion failed';
is($standby->safe_psql('postgres',
	q{SELECT owner || ' ' || token FROM dlock.leases WHERE name = 'job' AND state = 'live'}),
	$lease, 'after failover the lease is held by the same owner with the same token');
is($standby->safe_psql('postgres', q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('job', '1h', 'worker-3'))}),
	't', 'another owner is refused on the new primary');
my ($owner, $token) = split / /, $lease;
cmp_ok($standby->safe_psql('postgres', q{SELECT token FROM dlock.acquire('job-next', '1h')}),
	'>', $max_before, 'the first grant on the new primary is larger than every token before');
is($standby->safe_psql('postgres', "SELECT dlock.fence('job', $token)"), 't',
	'the holder\'s token still passes the fence on the new primary');
is($standby->safe_psql('postgres', qq{SELECT dlock.fence('acct:78', $set_token)}), 't',
	'the set\'s token still passes the fence on the new primary');
cmp_ok($standby->safe_psql('postgres',
	q{SELECT min(token) FROM dlock.try_acquire_all(ARRAY['acct:77', 'acct:79'], '1h', 'next')}),
	'>', $max_before, 'a set granted on the new primary has a token larger than every one before');
$standby->stop;

note 'asynchronous replication: what a failover can lose';
my $p2 = PostgreSQL::Test::Cluster->new('async_primary');
$p2->init(allows_streaming => 1);
$p2->start;
$p2->safe_psql('postgres', 'CREATE EXTENSION dlock');
$p2->backup('base2');
my $s2 = PostgreSQL::Test::Cluster->new('async_standby');
$s2->init_from_backup($p2, 'base2', has_streaming => 1);
$s2->start;
my $replicated = $p2->safe_psql('postgres',
	q{SELECT token FROM dlock.acquire('replicated', '1h', 'a')});
$p2->wait_for_catchup($s2);

# Cut the stream, then grant on the primary: acknowledged, never replicated
$s2->append_conf('postgresql.conf', "primary_conninfo = ''\n");
$s2->reload;
$p2->poll_query_until('postgres', 'SELECT count(*) = 0 FROM pg_stat_replication')
  or die 'replication did not stop';
my $lost = $p2->safe_psql('postgres', q{SELECT token FROM dlock.acquire('lost', '1h', 'b')});
ok($lost > $replicated, 'the primary acknowledged a grant after the stream was cut');
$p2->stop('immediate');
$s2->promote;
$s2->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die 'promotion failed';

is($s2->safe_psql('postgres', q{SELECT token FROM dlock.leases WHERE name = 'replicated'}),
	$replicated, 'a grant replicated before the failover survives it');
is($s2->safe_psql('postgres', q{SELECT count(*) FROM dlock.lease_state WHERE name = 'lost'}),
	'0', 'an acknowledged grant that was not replicated is lost in an asynchronous failover');
my $after = $s2->safe_psql('postgres', q{SELECT token FROM dlock.acquire('lost', '1h', 'c')});
cmp_ok($after, '>', $lost,
	'the new primary issues tokens above the lost one too (a new timeline, a new epoch)');
is($s2->safe_psql('postgres', "SELECT dlock.fence('lost', $lost)"), 'f',
	'the lost holder\'s token fences false on the new primary');
$s2->stop;

done_testing();
