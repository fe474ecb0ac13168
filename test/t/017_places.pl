# Places in a queue kept between polls: try_acquire(..., queue => true),
# with dlock in shared_preload_libraries.
#
# Pollers are served in arrival order; while a place is first, the name is
# kept for it (other pollers and plain try_acquire are refused, and the
# head of the acquire() queue waits); a place lapses ttl after its last
# poll; release() gives a place up; places and acquire() waiters form one
# queue in arrival order, whichever came first.  Without preloading,
# queue => true is refused (test/sql/errors.sql).
#
# Shares: a role keeps at most a quarter of dlock.max_queue_places (40
# here: 10 each), and is refused (53400, naming its share) beyond; other
# roles still poll; once every place is taken, acquire() of any name, by any
# role, still works: the head of an acquire() queue never needs a place of
# the pollers' pool.
#
# Purge: dlock.purge() leaves a name that a live place waits for, and
# deletes it once the place is given back or lapses.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('places');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dlock'\ndlock.max_queue_places = 40\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

# poll(name, owner, ttl): one poll; the token granted, or '' when refused
sub poll
{
	my ($name, $owner, $ttl) = @_;
	$ttl //= '10s';
	return $node->safe_psql('postgres',
		"SELECT token FROM dlock.try_acquire('$name', '$ttl', '$owner', queue => true)");
}
sub release
{
	my ($name, $owner) = @_;
	return $node->safe_psql('postgres', "SELECT dlock.release('$name', '$owner')");
}
sub holder
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce((SELECT owner FROM dlock.leases WHERE name = '$name' AND state = 'live'), '-')");
}

note 'pollers in arrival order';
like(poll('q', 'h'), qr/^\d+$/, 'a free name is granted to the first poller at once');
is(poll('q', 'c1'), '', 'c1 is refused and keeps its place');
is(poll('q', 'c2'), '', 'c2 is refused and keeps its place behind c1');
is(poll('q', 'c3'), '', 'c3 likewise');
is(release('q', 'h'), 't', 'the holder releases');
is(poll('q', 'c2'), '', 'the name is free, but c2 is not first: refused');
is($node->safe_psql('postgres', q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('q', '10s', 'other'))}), 't',
	'a plain try_acquire is refused while the name is kept for a place');
like(poll('q', 'c1'), qr/^\d+$/, 'c1, first, is granted');
is(poll('q', 'c1'), poll('q', 'c1'), 'c1 polling again extends its lease, same token');
is(release('q', 'c1'), 't', 'c1 releases');
like(poll('q', 'c2'), qr/^\d+$/, 'then c2 is granted');
is(release('q', 'c2'), 't', 'c2 releases');
is(poll('q', 'c1'), '', 'c1 comes back behind c3');
like(poll('q', 'c3'), qr/^\d+$/, 'c3 is granted');
is(release('q', 'c3'), 't', 'c3 releases');
like(poll('q', 'c1'), qr/^\d+$/, 'then c1');
is(release('q', 'c1'), 't', 'c1 releases');

note 'a place is not transactional: a rolled-back poll keeps it';
like(poll('r', 'h'), qr/^\d+$/, 'h holds r');
is($node->safe_psql('postgres', q{BEGIN;
	SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('r', '10s', 'c1', queue => true));
	ROLLBACK;}), 't', 'c1 polls in a transaction that rolls back');
is(poll('r', 'c2'), '', 'c2 queues');
is(release('r', 'h'), 't', 'h releases');
is(poll('r', 'c2'), '', 'c1 kept its place: c2 is not first');
like(poll('r', 'c1'), qr/^\d+$/, 'c1 is granted');
is(release('r', 'c1'), 't', 'c1 releases');
like(poll('r', 'c2'), qr/^\d+$/, 'then c2');
is(release('r', 'c2'), 't', 'c2 releases');

note 'a place lapses ttl after its last poll';
like(poll('l', 'h'), qr/^\d+$/, 'h holds l');
is(poll('l', 'gone', '300ms'), '', 'a client polls once with ttl 300ms and goes away');
is(poll('l', 'c2'), '', 'c2 queues behind it');
is(release('l', 'h'), 't', 'h releases');
is(poll('l', 'c2'), '', 'the place of the client that went away is still first');
sleep 0.4;
like(poll('l', 'c2'), qr/^\d+$/, 'once it lapsed, c2 is granted');
is(release('l', 'c2'), 't', 'c2 releases');

note 'release gives a place up';
like(poll('g', 'h'), qr/^\d+$/, 'h holds g');
is(poll('g', 'c1'), '', 'c1 queues');
is(poll('g', 'c2'), '', 'c2 queues behind c1');
is(release('g', 'c1'), 't', 'c1 gives up its place with release (true)');
is(release('g', 'c1'), 'f', 'a second release finds nothing (false)');
is(release('g', 'h'), 't', 'h releases');
like(poll('g', 'c2'), qr/^\d+$/, 'c2 is granted, c1 having left');
is(release('g', 'c2'), 't', 'c2 releases');

# waiter(name, owner): a dlock.acquire() in the background
sub waiter
{
	my ($name, $owner) = @_;
	my $bg = $node->background_psql('postgres');
	$bg->query_until(qr/started/, qq{\\echo started
SELECT 'granted-' || owner FROM dlock.acquire('$name', '10s', '$owner');
});
	$node->poll_query_until('postgres', qq{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE query LIKE '%dlock.acquire(''$name'', ''10s'', ''$owner'')%' AND state = 'active'
		  AND wait_event_type IN ('Lock', 'Extension')})
	  or die "$owner does not wait";
	return $bg;
}

note 'a place that came first goes before a waiter of acquire()';
like(poll('m', 'h'), qr/^\d+$/, 'h holds m');
is(poll('m', 'p1'), '', 'p1 polls first and keeps its place');
my $w = waiter('m', 'w1');
is(release('m', 'h'), 't', 'h releases: the waiter is woken');
sleep 0.3;
is(holder('m'), '-', 'but it waits for p1, who came first');
like(poll('m', 'p1'), qr/^\d+$/, 'p1 polls and is granted');
is(holder('m'), 'p1', 'p1 holds m');
is(release('m', 'p1'), 't', 'p1 releases');
like($w->query_until(qr/granted-w1/, ''), qr/granted-w1/, 'then the waiter is granted');
$w->quit;
is(release('m', 'w1'), 't', 'w1 releases');

note 'a waiter of acquire() that came first goes before a place';
like(poll('n', 'h'), qr/^\d+$/, 'h holds n');
$w = waiter('n', 'w1');
is(poll('n', 'p1'), '', 'p1 polls after the waiter queued: refused');
is(release('n', 'h'), 't', 'h releases');
like($w->query_until(qr/granted-w1/, ''), qr/granted-w1/, 'the waiter, first, is granted');
$w->quit;
is(poll('n', 'p1'), '', 'p1 is refused while the waiter holds n');
is(release('n', 'w1'), 't', 'w1 releases');
like(poll('n', 'p1'), qr/^\d+$/, 'then p1 is granted');
is(release('n', 'p1'), 't', 'p1 releases');

note 'a waiter cancelled while it heads the queue leaves no entry behind';
like(poll('x', 'h'), qr/^\d+$/, 'h holds x');
is(poll('x', 'p0'), '', 'p0 keeps a place, so that heads of the acquire() queue register');
my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_until(qr/started/, q{\echo started
SET statement_timeout = '500ms';
SELECT dlock.acquire('x', '10s', 'w9');
\echo done
});
$bg->query_until(qr/done/, '');
$bg->quit;
is(release('x', 'p0'), 't', 'p0 gives up its place');
is(release('x', 'h'), 't', 'h releases');
like(poll('x', 'p1'), qr/^\d+$/, 'a new poller is granted: no head entry was left by the cancelled waiter');
is(release('x', 'p1'), 't', 'p1 releases');

note 'purge leaves a name that a place waits for';
$node->safe_psql('postgres', 'CREATE DATABASE purging');
$node->safe_psql('purging', 'CREATE EXTENSION dlock');
# in_db(db, sql): one statement in a database; its result, or its error
sub in_db
{
	my ($db, $sql) = @_;
	my ($ret, $out, $err) = $node->psql($db, $sql);
	return $ret == 0 ? $out : $err;
}
like(in_db('purging', q{SELECT token FROM dlock.try_acquire('e', '200ms', 'h', '0')}),
	qr/^\d+$/, 'h holds e for 200ms');
is(in_db('purging', q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('e', '1h', 'p', queue => true))}),
	't', 'p polls and keeps its place for an hour');
like(in_db('purging', q{SELECT token FROM dlock.try_acquire('f', '200ms', 'h', '0')}),
	qr/^\d+$/, 'h holds f for 200ms');
is(in_db('purging', q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('f', '2s', 'p', queue => true))}),
	't', 'p polls f too, with a place that lapses after 2s');
sleep 0.3;
is(in_db('purging', q{SELECT string_agg(name || ' ' || state, ', ' ORDER BY name) FROM dlock.leases}),
	'e expired, f expired', 'both leases expired');
is(in_db('purging', q{SELECT dlock.purge('0')}), '0', 'purge leaves the names that places wait for');
is(in_db('purging', q{SELECT dlock.release('e', 'p')}), 't', 'p gives up its place in e');
is(in_db('purging', q{SELECT dlock.purge('0')}), '1', 'then purge deletes e');
is(in_db('purging', q{SELECT name FROM dlock.lease_state}), 'f', 'and leaves f');
sleep 2;
is(in_db('purging', q{SELECT dlock.purge('0')}), '1', 'and f, once its place lapsed');
is(in_db('purging', q{SELECT count(*) FROM dlock.lease_state}), '0', 'nothing is left');

note "a role's share of the places, and acquire() when they are all taken";
$node->safe_psql('postgres', q{
CREATE ROLE regress_poller1; CREATE ROLE regress_poller2;
CREATE ROLE regress_poller3; CREATE ROLE regress_poller4;
CREATE ROLE regress_other;
SELECT dlock.try_acquire('held:' || i, '1h', 'h') FROM generate_series(1, 11) i;
});
# places(role, from, to): role polls held:from .. held:to, one poll each;
# how many were refused with a place kept, or the first error
sub places
{
	my ($role, $from, $to) = @_;
	return in_db('postgres', qq{SET ROLE $role;
SELECT count(*) FROM generate_series($from, $to) i
 WHERE NOT EXISTS (SELECT FROM dlock.try_acquire('held:' || i, '1h', 'p', queue => true))});
}
is(places('regress_poller1', 1, 10), '10', 'one role keeps 10 places, its share');
is(in_db('postgres', q{SELECT places_live, places_max, fullest_role_places, role_share
		FROM dlock.queue_places()}),
	'10|40|10|10', 'dlock.queue_places(): 10 of 40 places live, one role at its share of 10');
my $refused = places('regress_poller1', 11, 11);
like($refused, qr/ERROR:  too many places in dlock's queues for role "regress_poller1"/,
	'its 11th place is refused');
like($refused, qr/DETAIL:  Role "regress_poller1" keeps 10 places, its share: a quarter of dlock.max_queue_places \(40\)\./,
	'the error names the share');
like($refused, qr/HINT:  .*dlock.max_queue_places/, 'and the setting to raise');
is(places('regress_other', 1, 1), '1', 'another role still polls and keeps a place');
is(in_db('postgres', q{SET ROLE regress_other; SELECT dlock.release('held:1', 'p')}), 't',
	'and gives it back');
is(places('regress_poller1', 1, 10), '10', 'polling again keeps the same 10 places');
is(places('regress_poller2', 1, 10), '10', 'a second role keeps 10');
is(places('regress_poller3', 1, 10), '10', 'a third');
is(places('regress_poller4', 1, 10), '10', 'a fourth: all 40 places are taken');
like(places('regress_other', 1, 1), qr/ERROR:  too many places in dlock's queues\nDETAIL:  All 40 places/,
	'a poller of a fifth role is refused: every place is taken');
is(in_db('postgres', q{SET ROLE regress_other; SELECT places_live, fullest_role_places
		FROM dlock.queue_places()}),
	'40|10', 'dlock.queue_places(), for any role: all 40 live, the fullest role at 10');

like(in_db('postgres', q{SET ROLE regress_other;
SELECT token FROM dlock.acquire('free', '10s', 'w')}), qr/^\d+$/,
	'acquire() of a free name still works, by any role');
like(in_db('purging', q{SELECT token FROM dlock.acquire('free', '10s', 'w')}), qr/^\d+$/,
	'in any database');
$w = waiter('held:11', 'w');
is(in_db('postgres', q{SELECT dlock.release('held:11', 'h')}), 't', 'a waiter heads a queue; the holder releases');
like($w->query_until(qr/granted-w/, ''), qr/granted-w/, 'and the waiter is granted');
$w->quit;
is(in_db('postgres', q{SELECT dlock.release('held:11', 'w')}), 't', 'w releases');

$node->stop;
done_testing();
