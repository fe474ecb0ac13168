# The edges of a transaction that need more than one session or a standby:
#  - PREPARE TRANSACTION of a grant waits for the synchronous standby, also
#    with synchronous_commit = off, and the prepared grant survives a
#    failover: nobody else is granted the name, COMMIT PREPARED makes it live;
#  - a lazy release never lowers what the caller asked of its standbys;
#  - a release committed through two-phase commit wakes the queue head, which
#    then waits in the lock manager for COMMIT PREPARED from any backend;
#  - probing tokens with dlock.holder_alive() never makes a session-bound
#    grant fail;
#  - waiting for a session-bound lease held by one's own backend sleeps;
#  - a deadlock between waits names the lease;
#  - a backend that ran DISCARD ALL exits without warnings.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use DlockTest qw(sync_pair background_query);

my ($primary, $standby) = sync_pair('edges_primary', 'edges_standby',
	conf => "max_prepared_transactions = 8\n");

sub waits_for_standby
{
	my ($node) = @_;
	return $node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'});
}

note 'a lazy release waits for the standby when the caller asks for it';
$primary->safe_psql('postgres', q{SELECT dlock.acquire('lazy', '1h', 'w')});
$primary->wait_for_catchup($standby, 'replay');
$standby->safe_psql('postgres', 'SELECT pg_wal_replay_pause()');
my $bg = background_query($primary, q{SET synchronous_commit = remote_apply;
SELECT 'released-' || dlock.release('lazy', 'w');});
ok(waits_for_standby($primary),
	'with synchronous_commit = remote_apply, a release waits for the standby to apply it');
$standby->safe_psql('postgres', 'SELECT pg_wal_replay_resume()');
like($bg->query_until(qr/released-t/, ''), qr/released-t/, 'and is acknowledged once applied');
is($standby->safe_psql('postgres', q{SELECT state FROM dlock.leases WHERE name = 'lazy'}),
	'released', 'the acknowledged release is visible on the standby');
is($bg->query_safe('SHOW synchronous_commit'), 'remote_apply',
	'the caller\'s setting is left as it was');
$bg->quit;

note 'PREPARE TRANSACTION of a grant waits for the synchronous standby';
$standby->stop;
$bg = background_query($primary, q{SET synchronous_commit = off;
BEGIN;
SELECT EXISTS (SELECT FROM dlock.try_acquire('prepared', '1h', 'w')) AS granted;
PREPARE TRANSACTION 'grant_2pc';
\echo prepared-done});
ok(waits_for_standby($primary),
	'with synchronous_commit = off, the PREPARE of a grant waits for the standby');
# (a PREPARE that waited for the stopped standby would not return: psql times out)
my $plain_rc = $primary->psql('postgres', q{SET synchronous_commit = off; BEGIN;
	CREATE TABLE probe (); PREPARE TRANSACTION 'plain_2pc'; COMMIT PREPARED 'plain_2pc'},
	timeout => 10, timed_out => \my $plain_timed_out);
ok(!$plain_timed_out && defined $plain_rc && $plain_rc == 0,
	'an ordinary PREPARE with synchronous_commit = off does not wait');
is($primary->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'}),
	'1', 'meanwhile the grant\'s PREPARE still waits: the standby was down');
$standby->start;
like($bg->query_until(qr/prepared-done/, ''), qr/prepared-done/,
	'the PREPARE returns once the standby has it');
$bg->quit;

$primary->stop('immediate');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'promotion failed';
is($standby->safe_psql('postgres', 'SELECT gid FROM pg_prepared_xacts'), 'grant_2pc',
	'after failover the prepared grant is there');
is($standby->safe_psql('postgres', q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('prepared', '1h', 'other'))}),
	't', 'and holds the name: another owner is refused');
$standby->safe_psql('postgres', q{COMMIT PREPARED 'grant_2pc'});
is($standby->safe_psql('postgres', q{SELECT owner || ' ' || state FROM dlock.leases WHERE name = 'prepared'}),
	'w live', 'COMMIT PREPARED on the new primary makes the grant live');
$standby->stop;

# The rest needs no standby
my $node = PostgreSQL::Test::Cluster->new('edges');
$node->init;
$node->append_conf('postgresql.conf', "max_prepared_transactions = 8\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

note 'a release through two-phase commit wakes the queue head';
# The head sleeps on its latch (at most a second at a time) while the lease
# is held.  Woken at PREPARE, it waits for the prepared transaction's lock on
# the name, and COMMIT PREPARED grants it at once.  Five rounds, each
# allowing a tenth of that sleep, tell the wake-up from the safety net.
my $woken = 0;
my $granted = 0;
for my $round (1 .. 5)
{
	my $name = "2pc-wake-$round";
	$node->safe_psql('postgres', "SELECT dlock.acquire('$name', '1h', 'h')");
	my $waiter = background_query($node,
		qq{SELECT 'granted-' || owner FROM dlock.acquire('$name', '1h', 'w', timeout => '30s');});
	$node->poll_query_until('postgres', qq{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE wait_event_type = 'Extension' AND query LIKE '%$name%' AND pid <> pg_backend_pid()})
	  or die 'the waiter did not start waiting';
	$node->safe_psql('postgres', qq{BEGIN; SELECT dlock.release('$name', 'h');
		PREPARE TRANSACTION 'release_$round'});
	my $deadline = time + 0.1;
	my $locked = 0;
	while (!$locked && time < $deadline)
	{
		$locked = $node->safe_psql('postgres', qq{SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%$name%' AND pid <> pg_backend_pid()});
	}
	$woken++ if $locked;
	$node->safe_psql('postgres', "COMMIT PREPARED 'release_$round'");
	$granted++ if $waiter->query_until(qr/granted-w/, '') =~ /granted-w/;
	$waiter->quit;
}
is($woken, 5, 'every round: at PREPARE the head wakes and waits for the prepared transaction');
is($granted, 5, 'every round: COMMIT PREPARED from another backend grants the head');

note 'dlock.holder_alive() probes never make a session-bound grant fail';
$node->pgbench(
	'--no-vacuum --client=4 --time=3',
	0,
	[qr/processed: [1-9]/],
	[qr/^$/],
	'session-bound grants while others probe the tokens about to be issued',
	{
		'probe' => q{SELECT count(*) FROM generate_series(1, 20) i
  WHERE dlock.holder_alive((SELECT last_value FROM dlock.token_seq) + i);
},
		'grant' => q{SELECT dlock.try_acquire('probed:' || :client_id, '1h', 'w', session_bound => true);
SELECT dlock.release('probed:' || :client_id, 'w');
},
	});

note 'waiting for a session-bound lease held by this very backend sleeps';
$bg = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $bg->query_safe('SELECT pg_backend_pid()');

sub cpu_seconds
{
	my ($of) = @_;
	open my $fh, '<', "/proc/$of/stat" or die "no /proc/$of/stat: $!";
	my @f = split / /, (split /\) /, <$fh>)[1];
	return ($f[11] + $f[12]) / 100;    # utime + stime, in clock ticks
}
$bg->query_safe(q{SELECT dlock.try_acquire('self', '1h', 'a', session_bound => true)});
my $cpu_before = cpu_seconds($pid);
$bg->query(q{SELECT dlock.acquire('self', '1h', 'b', timeout => '2s')});
my $cpu_used = cpu_seconds($pid) - $cpu_before;
like($bg->{stderr}, qr/could not acquire lease "self" within the timeout/, 'the wait times out');
cmp_ok($cpu_used, '<', 0.5, "and used little CPU meanwhile (${cpu_used}s in 2s)");
$bg->quit;

note 'a deadlock between two waits names the lease';
my $a = $node->background_psql('postgres', on_error_stop => 0);
my $b = $node->background_psql('postgres', on_error_stop => 0);
$a->query_safe(q{BEGIN; SELECT dlock.acquire('dl-a', '1h', 'a')});
$b->query_safe(q{BEGIN; SELECT dlock.acquire('dl-b', '1h', 'b')});
$a->query_until(qr/sent/, qq{\\echo sent\nSELECT dlock.acquire('dl-b', '1h', 'a');\n\\echo a-done\n});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_locks WHERE NOT granted})
  or die 'the first wait did not start';
$b->query_until(qr/b-done/, qq{SELECT dlock.acquire('dl-a', '1h', 'b');\n\\echo b-done\n});
$a->query_until(qr/a-done/, '');
my $errors = $a->{stderr} . $b->{stderr};
like($errors, qr/deadlock detected/, 'the lock manager detects the deadlock');
like($errors, qr/CONTEXT:\s+waiting for lease "dl-[ab]"/, 'and the error names the lease');
$a->quit;
$b->quit;

note 'a backend that ran DISCARD ALL exits without warnings';
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	SELECT dlock.try_acquire('discarded', '1h', 'w', session_bound => true);
	DISCARD ALL;
	SELECT dlock.try_acquire('discarded-2', '1h', 'w', session_bound => true);
	DISCARD ALL;
});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM dlock.locks WHERE kind = 'session'})
  or die 'the session locks were not released';
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/WARNING/, 'no warning in the server log');

$node->stop;
done_testing();
