# Waiting under churn: timeouts, cancelled and terminated waiters and
# holders leave the queue in order and leave no lock behind; the same with
# shared_preload_libraries.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $node = PostgreSQL::Test::Cluster->new('waiting');
$node->init;
$node->append_conf('postgresql.conf', "max_connections = 60\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $dlock_locks = q{SELECT count(*) FROM dlock.locks};

# waiter(name, owner, ttl): a session that waits for a lease in the background
sub waiter
{
	my ($name, $owner, $ttl) = @_;
	my $bg = $node->background_psql('postgres');
	$bg->query_safe("SET application_name = '$owner'");
	$bg->query_until(qr/started/, qq{\\echo started
SELECT 'granted-' || owner FROM dlock.acquire('$name', '$ttl', '$owner');
});
	return $bg;
}

sub queued
{
	my ($n) = @_;
	$node->poll_query_until('postgres', qq{SELECT count(*) = $n FROM pg_stat_activity
		WHERE query LIKE '%dlock.acquire(%' AND state = 'active'
		  AND wait_event_type IN ('Lock', 'Extension')})
	  or die "waiters did not queue";
}

sub pid_of
{
	my ($owner) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = '$owner'");
}

note 'a terminated head and a terminated holder do not disturb the others';
$node->safe_psql('postgres', q{SELECT dlock.acquire('t', '1min', 'h')});
my $w1 = waiter('t', 'w1', '2s');
queued(1);
my $w2 = waiter('t', 'w2', '2s');
queued(2);
my $w3 = waiter('t', 'w3', '2s');
queued(3);

$node->safe_psql('postgres', "SELECT pg_terminate_backend(" . pid_of('w1') . ", 10000)");
queued(2);
is($node->safe_psql('postgres', q{SELECT dlock.release('t', 'h')}), 't', 'holder releases');
like($w2->query_until(qr/granted-w2/, ''), qr/granted-w2/,
	'the next waiter in line is granted after the head was terminated');
queued(1);
is($node->safe_psql('postgres', q{SELECT owner FROM dlock.leases WHERE name = 't' AND state = 'live'}),
	'w2', 'w3 still waits while w2 holds the lease');

# w2's backend goes away; its (ordinary) lease lives on until its ttl
$node->safe_psql('postgres', "SELECT pg_terminate_backend(" . pid_of('w2') . ", 10000)");
like($w3->query_until(qr/granted-w3/, ''), qr/granted-w3/,
	'the last waiter is granted when the terminated holder\'s lease expires');
$w3->quit;
# the psql sessions of terminated backends have already gone
eval { $w1->quit };
eval { $w2->quit };
$node->poll_query_until('postgres', "SELECT ($dlock_locks) = 0")
  or die 'locks left';
is($node->safe_psql('postgres', $dlock_locks), '0', 'no dlock lock is left behind');

note 'churn: timeouts, cancels and terminations under load';
$node->safe_psql('postgres', q{
	CREATE FUNCTION churn_acquire(n int, client int, timeout_ms int) RETURNS bigint
	LANGUAGE plpgsql AS $$
	BEGIN
	  RETURN (dlock.acquire('churn-' || n, '300ms', 'c' || client,
	                        timeout => timeout_ms * interval '1ms',
	                        session_bound => client % 3 = 0)).token;
	EXCEPTION WHEN lock_not_available THEN
	  RETURN NULL;
	END $$;
});
my $script = $node->basedir . '/churn.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
\set n random(0, 2)
\set t random(1, 60)
SELECT churn_acquire(:n, :client_id, :t);
\sleep 1 ms
SELECT dlock.release('churn-' || CAST(:n AS integer), 'c' || CAST(:client_id AS integer));
});
my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '24', '-j', '2', '-T', '8', '-f', $script,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$out, '2>', \$err);

# Meanwhile cancel and terminate some of the waiting backends
my $interrupted = 0;
foreach my $round (1 .. 6)
{
	sleep 1;
	my $fn = $round % 2 ? 'pg_cancel_backend' : 'pg_terminate_backend';
	$interrupted += $node->safe_psql('postgres', qq{
		SELECT count(*) FROM (SELECT $fn(pid) FROM pg_stat_activity
		 WHERE query LIKE '%churn_acquire%' AND state = 'active' AND pid <> pg_backend_pid()
		 LIMIT 2) s});
}
$pgbench->finish;
my ($cycles) = $out =~ /number of transactions actually processed: (\d+)/;
note "churn: $cycles cycles, $interrupted backends cancelled or terminated";
cmp_ok($cycles // 0, '>', 100, 'the churn ran');
cmp_ok($interrupted, '>', 0, 'some waiters were interrupted');

$node->poll_query_until('postgres', qq{SELECT count(*) = 0 FROM pg_stat_activity
	WHERE query LIKE '%churn%' AND pid <> pg_backend_pid()})
  or die 'churn sessions did not end';
is($node->safe_psql('postgres', $dlock_locks), '0',
	'no dlock lock is left in the shared lock table after the churn');
foreach my $n (0 .. 2)
{
	is($node->safe_psql('postgres',
		"SELECT owner FROM dlock.acquire('churn-$n', '1s', 'after', timeout => '5s')"),
		'after', "churn-$n can be acquired after the churn");
}
$node->stop;

note 'with shared_preload_libraries';
my $pre = PostgreSQL::Test::Cluster->new('preload');
$pre->init;
$pre->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$pre->start;
$pre->safe_psql('postgres', 'CREATE EXTENSION dlock');
is($pre->safe_psql('postgres', 'SHOW dlock.max_ttl'), '1d', 'settings are defined at server start');
$node = $pre;
$node->safe_psql('postgres', q{SELECT dlock.acquire('p', '1min', 'h')});
my $pw = waiter('p', 'pw', '1min');
queued(1);
$node->safe_psql('postgres', q{SELECT dlock.release('p', 'h')});
like($pw->query_until(qr/granted-pw/, ''), qr/granted-pw/, 'a waiter is woken by the release');
is($node->safe_psql('postgres', q{SELECT dlock.fence('p', token) FROM dlock.leases WHERE name = 'p'}),
	't', 'fence works with the library preloaded');
$pw->quit;

# When preloaded, a grant or release looks for a queue head or watchers only
# while some session of the cluster is counted as waiting or watching
# (waiting.c).  Either must still be woken at commit: without the wake-up
# it would find the change only at its next look, up to 1 s after the last.
# Each round starts the wait, lets it settle (its last look is then at most
# about 0.25 s old), makes the change, and requires the waiter to be done
# within 0.4 s of it, where a missed wake-up would take 0.6 s or more.
note 'with shared_preload_libraries, changes wake queue heads and watchers at commit';
foreach my $round (1 .. 3)
{
	$node->safe_psql('postgres', qq{SELECT dlock.acquire('pq$round', '1min', 'h')});
	my $head = waiter("pq$round", "pq$round", '1min');
	queued(1);
	sleep(0.15);
	my $released = (split /\n/, $node->safe_psql('postgres',
		qq{SELECT dlock.release('pq$round', 'h');
		   SELECT clock_timestamp();}))[1];
	like($head->query_until(qr/granted-pq$round/, ''), qr/granted-pq$round/,
		"round $round: the head is granted");
	cmp_ok($node->safe_psql('postgres',
		qq{SELECT extract(epoch FROM acquired_at - '$released'::timestamptz)
		     FROM dlock.leases WHERE name = 'pq$round'}), '<', 0.4,
		"round $round: the release woke the head");
	$head->quit;

	my $watcher = $node->background_psql('postgres');
	$watcher->query_until(qr/started/, qq{\\echo started
SELECT 'seen-' || dlock.watch('pw$round', NULL, '10s'), clock_timestamp();
});
	$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE query LIKE '%dlock.watch(%' AND wait_event_type = 'Extension'})
	  or die 'the watcher did not start waiting';
	sleep(0.15);
	my $granted = (split /\n/, $node->safe_psql('postgres',
		qq{SELECT EXISTS (SELECT FROM dlock.try_acquire('pw$round', '1min', 'g'));
		   SELECT acquired_at FROM dlock.leases WHERE name = 'pw$round';}))[1];
	my $seen = $watcher->query_until(qr/seen-\d+\|[^\n]+\n/, '');
	my ($seen_at) = $seen =~ /seen-\d+\|([^\n]+)/;
	cmp_ok($node->safe_psql('postgres',
		qq{SELECT extract(epoch FROM '$seen_at'::timestamptz - '$granted'::timestamptz)}),
		'<', 0.4, "round $round: the grant woke the watcher");
	$watcher->quit;
}
$pre->stop;

done_testing();
