# dlock.purge() with other sessions and with pg_cron:
#  - a name that someone waits for is not purged, even while the name is
#    free and its lock is not held: the waiter at the head of the queue is
#    stopped (SIGSTOP) while it sleeps, right after the release that frees
#    the name;
#  - names with many permit rows, on a server whose lock table is small
#    (max_locks_per_transaction = 10): a call stops taking names once the
#    locks it holds reach its budget, so it never runs the lock table out
#    (53200), and repeated calls purge them all; a name whose rows alone
#    need more locks than the budget (1000 permits, more than the lock
#    table holds) is purged in parts, its highest slots first, without
#    holding up the other names; a grant waits for a part's commit and gets
#    a larger token;
#  - pg_cron runs dlock.purge() on a schedule: ended names go, live ones and
#    those in their lock-delay stay.  Skipped when Debian's
#    postgresql-15-cron is not installed.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
my $have_cron = -e "$sharedir/extension/pg_cron.control";

my $node = PostgreSQL::Test::Cluster->new('purge');
$node->init;
$node->append_conf('postgresql.conf', "max_connections = 10\nmax_locks_per_transaction = 10\n");
if ($have_cron)
{
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 20
});
}
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

note 'a name with a waiter is not purged';
$node->safe_psql('postgres', q{SELECT dlock.try_acquire('queued', '1h', 'a')});
my $bg = $node->background_psql('postgres');
my $waiter = $bg->query_safe('SELECT pg_backend_pid()');
$bg->query_until(qr/started/, q{\echo started
SELECT 'granted-' || owner FROM dlock.acquire('queued', '1h', 'b');
});

# The waiter holds the head of the queue and sleeps on its latch between
# looks at the lease; stop it there, not while it holds the name's lock
my $locks_of_waiter = qq{
  SELECT string_agg(kind, ',' ORDER BY kind) FROM dlock.locks
   WHERE pid = $waiter AND granted};
my $stopped = 0;
for my $attempt (1 .. 100)
{
	my $sleeping = $node->safe_psql('postgres',
		qq{SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $waiter});
	if ($sleeping eq 't')
	{
		kill 'STOP', $waiter;
		my $state = $node->safe_psql('postgres',
			qq{SELECT wait_event_type FROM pg_stat_activity WHERE pid = $waiter});
		if ($state eq 'Extension' && $node->safe_psql('postgres', $locks_of_waiter) eq 'queue')
		{
			$stopped = 1;
			last;
		}
		kill 'CONT', $waiter;
	}
	sleep 0.05;
}
ok($stopped, 'the waiter is stopped at the head of the queue, holding no name lock');

is($node->safe_psql('postgres', q{SELECT dlock.release('queued', 'a')}),
	't', 'the holder releases while the waiter cannot take the name');
is($node->safe_psql('postgres', q{SELECT dlock.purge('0')}),
	'0', 'purge skips the free name that is waited for, without waiting itself');
is($node->safe_psql('postgres', q{SELECT state FROM dlock.leases WHERE name = 'queued'}),
	'released', 'its row stays');
kill 'CONT', $waiter;
like($bg->query_until(qr/granted-/, ''), qr/granted-b/, 'the waiter is granted the name once it runs');
is($bg->query_safe(q{SELECT dlock.release('queued', 'b')}), 't', 'and releases it');
is($node->safe_psql('postgres', q{SELECT dlock.purge('0')}), '1',
	'then nobody waits, and the name is purged');
$bg->quit;

note 'names with many permit rows, and a small lock table';
# Each name has 16 rows, one per permit: purging it holds the name's lock
# and the pins of 15 rows until the end of the transaction.  One call that
# took every name would need 100 * 16 locks, several times what the lock
# table has room for here.
$node->safe_psql('postgres', q{
CREATE PROCEDURE permits(prefix text, names int, permits int)
LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. names LOOP
    PERFORM dlock.try_acquire(prefix || i, '1h', 'o' || j, max_holders => permits)
       FROM generate_series(1, permits) j;
    PERFORM dlock.release(prefix || i, 'o' || j) FROM generate_series(1, permits) j;
    COMMIT;
  END LOOP;
END $$;
CALL permits('permits:', 100, 16);
});
my ($rows, $room) = split /\|/, $node->safe_psql('postgres', q{
SELECT (SELECT count(*) FROM dlock.lease_state WHERE name LIKE 'permits:%'),
       current_setting('max_locks_per_transaction')::int *
       (current_setting('max_connections')::int +
        -- the autovacuum workers and the launcher, and from 17 on the slot
        -- sync worker; from 18 on, the workers' slots and those two
        coalesce(current_setting('autovacuum_worker_slots', true)::int + 2,
                 current_setting('autovacuum_max_workers')::int + 1 +
                 (current_setting('server_version_num')::int >= 170000)::int) +
        current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int +
        current_setting('max_prepared_transactions')::int)});
is($rows, 1600, '100 names with 16 ended permit rows each');
cmp_ok($rows, '>', 2 * $room, "more rows than twice the lock table's $room entries");

my ($calls, $purged, $most_locks, $failure) = (0, 0, 0, '');
while ($calls < 1000)
{
	my ($ret, $out, $err) = $node->psql('postgres', q{
BEGIN;
SELECT dlock.purge('0') || ' ' || (SELECT count(*) FROM dlock.locks WHERE pid = pg_backend_pid());
COMMIT;});
	if ($ret != 0)
	{
		$failure = $err;
		last;
	}
	$calls++;
	my ($n, $locks) = split / /, $out;
	$purged += $n;
	$most_locks = $locks if $locks > $most_locks;
	last if $n == 0;
}
is($failure, '', 'no call fails (53200 out of shared memory before)');
is($purged, 100, 'repeated calls purge every name');
cmp_ok($calls, '>', 2, "over several calls ($calls)");
cmp_ok($most_locks, '<=', int($room / 4),
	"a call holds at most $most_locks locks, within its budget: a quarter of the lock table");
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.lease_state WHERE name LIKE 'permits:%'}),
	'0', 'no permit row is left');

note 'a name whose rows need more locks than a call may hold';
# A semaphore of 1000 permits, the most a name can have, all ended: deleting
# its rows at once would hold 1000 locks, more than this server's lock table
# has room for.  Such a name is purged in parts, its highest slots first,
# each part within the budget, and the names after it are purged too, however
# many calls its parts take.  (Taken whole, it ran the lock table out at
# every call, and no name was purged any more.)
my $budget = int($room / 4);
$node->safe_psql('postgres', q{
CREATE PROCEDURE many_permits(name text, permits int)
LANGUAGE plpgsql AS $$
BEGIN
  -- A commit every 20 grants and every 20 releases: one transaction that
  -- granted every permit would itself run the small lock table out
  FOR j IN 1 .. permits LOOP
    PERFORM dlock.try_acquire(name, '1h', 'o' || j, max_holders => permits);
    IF j % 20 = 0 THEN COMMIT; END IF;
  END LOOP;
  COMMIT;
  FOR j IN 1 .. permits LOOP
    PERFORM dlock.release(name, 'o' || j);
    IF j % 20 = 0 THEN COMMIT; END IF;
  END LOOP;
  COMMIT;
END $$;
CALL many_permits('huge', 1000);
});
$node->safe_psql('postgres', q{SELECT dlock.try_acquire('after:' || i, '1h', 'o') FROM generate_series(1, 50) i});
$node->safe_psql('postgres', q{SELECT dlock.release('after:' || i, 'o') FROM generate_series(1, 50) i});
is( $node->safe_psql('postgres', q{
SELECT count(*) FILTER (WHERE name = 'huge') || ' ' || count(*) FILTER (WHERE name LIKE 'after:%')
  FROM dlock.leases WHERE state = 'released'}),
	'1000 50', 'a name with 1000 released permits, then 50 released names');
cmp_ok(1000, '>', $room, "its rows need more locks than the lock table's $room entries");

# Each call in a backend of its own, so that each starts its scan afresh:
# before, every call began with the name and failed.  Failed calls are
# counted, up to 5, to show that no later call gets past the name either.
my ($huge_calls, $huge_failures, $huge_failure, $huge_most) = (0, 0, '', 0);
my $lowest_kept = 1;
while ($huge_calls < 100 && $huge_failures < 5)
{
	my ($ret, $out, $err) = $node->psql('postgres', q{
BEGIN;
SELECT dlock.purge('0') || ' ' || (SELECT count(*) FROM dlock.locks WHERE pid = pg_backend_pid());
COMMIT;
SELECT count(*) = coalesce(max(slot) + 1, 0) FROM dlock.lease_state WHERE name = 'huge';});
	if ($ret != 0)
	{
		$huge_failure = $err if $huge_failures++ == 0;
		next;
	}
	$huge_calls++;
	my ($result, $kept) = split /\n/, $out;
	my ($n, $locks) = split / /, $result;
	$huge_most = $locks if $locks > $huge_most;
	$lowest_kept = 0 if $kept ne 't';
	last if $n == 0;
}
is($huge_failures, 0, 'no call fails (every call failed before: 53200 out of shared memory)')
  or diag("the first failure: $huge_failure");
is( $node->safe_psql('postgres', q{SELECT count(*) FROM dlock.lease_state WHERE name LIKE 'after:%'}),
	'0', 'the names after it are purged');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.lease_state WHERE name = 'huge'}),
	'0', 'and so is the name itself');
cmp_ok($huge_calls, '>=', int((1000 + $budget - 2) / ($budget - 1)),
	"in parts of at most " . ($budget - 1) . " permit rows ($huge_calls calls)");
cmp_ok($huge_most, '<=', $budget, "a call holds at most $huge_most locks, within its budget of $budget");
ok($lowest_kept, 'the rows kept after each part are those of the lowest slots');

note 'a part of a name next to a grant';
$node->safe_psql('postgres', q{CALL many_permits('huge', 1000);});
my ($old_max, $old_high) = split /\|/, $node->safe_psql('postgres',
	q{SELECT max(token), max(token) FILTER (WHERE slot = 999) FROM dlock.lease_state WHERE name = 'huge'});
my $purger = $node->background_psql('postgres');
# psql stops at an error (53200 before), and the session with it
my ($part, $part_err) = eval {
	$purger->query(q{BEGIN;
SELECT dlock.purge('0') || ' ' || (SELECT count(*) FROM dlock.locks WHERE pid = pg_backend_pid());});
};
$part_err = 1 if $@;
is($part_err, 0, 'an open transaction purges a part of the name');
SKIP:
{
	skip 'the purge failed', 8 if $part_err;
	is($part, "1 $budget", "the call counts the name and holds its whole budget of $budget locks");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM dlock.try_acquire('huge', '1min', 'x', max_holders => 1000)}),
		'0', 'try_acquire of the name is refused while the part is not committed');

	my $granter = $node->background_psql('postgres');
	my $granter_pid = $granter->query_safe('SELECT pg_backend_pid()');
	$granter->query_until(qr/waiting/, q{\echo waiting
SELECT 'token ' || token FROM dlock.acquire('huge', '1min', 'w', max_holders => 1000);
});
	ok( $node->poll_query_until('postgres', qq{
SELECT EXISTS (SELECT FROM dlock.locks WHERE pid = $granter_pid AND kind = 'name' AND NOT granted)}),
		'acquire() of the name waits for the name lock the part holds');
	$purger->query_safe('COMMIT');
	my ($token) = $granter->query_until(qr/token \d+/, '') =~ /token (\d+)/;
	cmp_ok($token, '>', $old_max, 'once the part commits, the waiting grant gets a larger token');
	is( $node->safe_psql('postgres', q{
SELECT count(*) || ' ' || max(slot) || ' ' || min(token) FILTER (WHERE owner = 'w')
  FROM dlock.lease_state WHERE name = 'huge'}),
		(1000 - ($budget - 1)) . ' ' . (999 - ($budget - 1)) . " $token",
		'in a slot that is left: the part deleted only the highest slots');
	is($node->safe_psql('postgres', qq{SELECT dlock.fence('huge', $old_high)}),
		'f', 'the token of a deleted permit fences false');
	is($node->safe_psql('postgres', q{SELECT dlock.purge('0')}),
		'0', 'the name with a live permit is not purged, not even in part');
	is($granter->query_safe(q{SELECT dlock.release('huge', 'w')}), 't', 'the permit is released');
	$granter->quit;
}
eval { $purger->quit; };
my ($loop_ret, $loop_out, $loop_err) = $node->psql('postgres', q{
CREATE PROCEDURE purge_all() LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    EXIT WHEN dlock.purge('0') = 0;
    COMMIT;
  END LOOP;
END $$;
CALL purge_all();});
is($loop_err, '', 'a loop that calls purge() until it returns 0, with a commit between calls, ends');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.lease_state}), '0',
	'and leaves nothing, though a part of a name is not a whole name');

SKIP:
{
	skip 'pg_cron is not installed (Debian package postgresql-15-cron)', 5
	  unless $have_cron;

	note 'pg_cron runs dlock.purge() on a schedule';
	$node->safe_psql('postgres', 'CREATE EXTENSION pg_cron');
	my $version = $node->safe_psql('postgres',
		q{SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'});
	my ($major, $minor) = $version =~ /^(\d+)\.(\d+)/;
	# Intervals in seconds came with pg_cron 1.5; before, once a minute
	my $schedule = ($major > 1 || $minor >= 5) ? '2 seconds' : '* * * * *';
	note "pg_cron $version, schedule '$schedule'";

	$node->safe_psql('postgres', q{
SELECT dlock.try_acquire('cron:ended:' || i, '1h', 'o') FROM generate_series(1, 20) i;
SELECT dlock.release('cron:ended:' || i, 'o') FROM generate_series(1, 20) i;
SELECT dlock.try_acquire('cron:live', '1h', 'o');
SELECT dlock.try_acquire('cron:delayed', '1s', 'o', '1h');
});
	$node->safe_psql('postgres',
		qq{SELECT cron.schedule('dlock-purge', '$schedule', \$\$SELECT dlock.purge('1 second')\$\$)});

	ok( $node->poll_query_until('postgres',
			q{SELECT count(*) = 0 FROM dlock.lease_state WHERE name LIKE 'cron:ended:%'}),
		'the scheduled purge deletes the ended names');
	is( $node->safe_psql('postgres',
			q{SELECT string_agg(name || ' ' || state, ', ' ORDER BY name) FROM dlock.leases}),
		'cron:delayed expired, cron:live live',
		'the live name and the one in its lock-delay stay');
	is( $node->safe_psql('postgres', q{
SELECT count(*) FILTER (WHERE status = 'succeeded') > 0 AND count(*) FILTER (WHERE status = 'failed') = 0
  FROM cron.job_run_details WHERE command LIKE '%dlock.purge%'}),
		't', 'the job runs succeed');
	is( $node->safe_psql('postgres', q{
SELECT max(return_message) FROM cron.job_run_details
 WHERE command LIKE '%dlock.purge%' AND status = 'succeeded'}),
		'SELECT 1', 'a run reports its result');
	is($node->safe_psql('postgres', q{SELECT cron.unschedule('dlock-purge')}),
		't', 'the job is unscheduled');
}

$node->stop;
done_testing();
