# Shared leases and counting semaphores across holders' deaths, crashes, a
# dump and restore, a failover, and under churn.
#
# A dead holder never leaks a permit: the exit of a session-bound holder
# frees its permit at once, a non-session-bound holder's permit comes back
# at its expiry on the server clock (not before), and after a crash the
# permits come back the same ways.  Tokens never repeat over every kind:
# grants of all three kinds under load, a crash in the middle, and grants
# after it are larger than every acknowledged one; a dump restores slots,
# kinds and limits, and the next grants are larger than every restored
# token.  After a failover to a synchronous standby the shared leases and
# permits are there and fence true.  Last, a churn (test/kinds_churn.c:
# fourteen workers on a semaphore of three and a name of readers and
# writers, short ttls, timeouts and cancels): never more than three
# permits inside under the fence, a writer always alone, no deadlock, no
# internal error, nothing left in dlock.locks.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use DlockTest qw(sync_pair psql_script background_query locks_left);

my $node = PostgreSQL::Test::Cluster->new('kinds');
$node->init;
# (verbose: the log shows every error's SQLSTATE)
$node->append_conf('postgresql.conf', qq{
max_connections = 60
restart_after_crash = on
log_error_verbosity = verbose
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub sql { return $node->safe_psql('postgres', @_); }

# wait_for(pattern): until a backend runs a query matching the LIKE pattern
# and waits (on a lock, or on its latch as the head of a queue)
sub wait_for
{
	my ($like) = @_;
	(my $lit = $like) =~ s/'/''/g;
	$node->poll_query_until('postgres', qq{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE query LIKE '$lit' AND pid <> pg_backend_pid()
		  AND wait_event_type IN ('Lock', 'Extension')})
	  or die "nobody waits in $like";
}

#
# A dead holder never leaks a permit
#
note 'the exit of a session-bound holder frees its permit at once';
my $sa = $node->background_psql('postgres');
my $a_token = $sa->query_safe(
	q{SELECT token FROM dlock.try_acquire('dead', '1h', 'a', session_bound => true, max_holders => 2)});
my $a_pid = $sa->query_safe('SELECT pg_backend_pid()');
my $sb = $node->background_psql('postgres');
my $b_token = $sb->query_safe(q{SELECT token FROM dlock.try_acquire('dead', '1h', 'b', max_holders => 2)});
my $b_pid = $sb->query_safe('SELECT pg_backend_pid()');
my ($a_slot, $b_slot) = map { sql("SELECT slot FROM dlock.lease_state WHERE name = 'dead' AND owner = '$_'") } qw(a b);
is(sql(q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('dead', '1h', 'x', max_holders => 2))}), 't',
	'a semaphore of 2 with two live permits refuses a third');

my $sc = background_query($node, q{
SELECT 'granted-' || token FROM dlock.acquire('dead', '1h', 'c', timeout => '60s', max_holders => 2);
\echo waited}, on_error_stop => 0);
wait_for(q{%acquire('dead', '1h', 'c'%});
my $start = time;
sql("SELECT pg_terminate_backend($a_pid, 10000)");
my ($c_token) = $sc->query_until(qr/waited/, '') =~ /granted-(\d+)/;
note sprintf('the waiter was granted %.0f ms after the holder was terminated', (time - $start) * 1000);
ok(defined $c_token, 'a waiter is granted after the session-bound holder is terminated, '
	  . 'with every ttl at 1 hour');
is(sql(q{SELECT string_agg(owner || ' ' || slot, ', ' ORDER BY owner) FROM dlock.lease_state WHERE name = 'dead'}),
	"b $b_slot, c $a_slot", 'into the dead holder\'s slot, while the other permit stays');
is(sql("SELECT dlock.fence('dead', $a_token)"), 'f', 'the dead holder\'s token fences false');
eval { $sa->quit };

note 'a non-session-bound holder\'s permit comes back at its expiry, not before';
my $b_expires = $sb->query_safe(q{SELECT expires_at FROM dlock.renew('dead', 'b', '3s')});
sql("SELECT pg_terminate_backend($b_pid, 10000)");
eval { $sb->quit };
$start = time;
my $d_token = sql(q{SELECT token FROM dlock.acquire('dead', '1h', 'd', timeout => '60s', max_holders => 2)});
note sprintf('the waiter was granted %.1f s after the holder was terminated', time - $start);
is(sql(qq{SELECT slot, acquired_at >= '$b_expires'::timestamptz
	    FROM dlock.lease_state WHERE name = 'dead' AND owner = 'd'}),
	"$b_slot|t", 'the next permit is granted into its slot at or after its expiry on the server clock');
cmp_ok($d_token, '>', $c_token, 'with a larger token');
is(sql("SELECT dlock.fence('dead', $b_token)"), 'f', 'the reclaimed holder\'s token fences false');
is(sql("SELECT dlock.fence('dead', $c_token) AND dlock.fence('dead', $d_token)"), 't',
	'the live permits fence true');
$sc->quit;

note 'after a crash the permits come back: a dead holder\'s at once, the others at expiry';
my ($p_token, $p_expires) = split /\|/,
  sql(q{SELECT token, expires_at FROM dlock.try_acquire('crash', '4s', 'p', max_holders => 2)});
my $p_slot = sql("SELECT slot FROM dlock.lease_state WHERE name = 'crash' AND token = $p_token");
my $q = $node->background_psql('postgres');
my $q_token = $q->query_safe(
	q{SELECT token FROM dlock.try_acquire('crash', '1h', 'q', session_bound => true, max_holders => 2)});
my $q_pid = $q->query_safe('SELECT pg_backend_pid()');
my $issued = sql('SELECT last_value FROM dlock.token_seq');
# kill -9 of a backend: the postmaster restarts every backend
my $log_offset = -s $node->logfile;
kill 'KILL', $q_pid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
$node->poll_query_until('postgres', 'SELECT true') or die 'server did not recover';
eval { $q->quit };
my @after;
for my $owner ('r', 's')
{
	push @after, sql(qq{SELECT token FROM dlock.acquire('crash', '1h', '$owner', timeout => '60s', max_holders => 2)});
}
is(scalar(grep { /^\d+$/ } @after), 2,
	'after the crash both permits are granted again (the session-bound one would hold for an hour)');
is(sql(qq{SELECT owner IN ('r', 's') AND acquired_at >= '$p_expires'::timestamptz
	    FROM dlock.lease_state WHERE name = 'crash' AND slot = $p_slot}),
	't', 'the slot of the permit that was not session-bound at or after its expiry');
ok((grep { $_ > $issued } @after) == 2, "tokens after the crash are larger than every token before ($issued)");
is(sql("SELECT dlock.fence('crash', $p_token) OR dlock.fence('crash', $q_token)"), 'f',
	'the old permits fence false');

#
# Tokens never repeat: every kind under load, a crash, a dump and restore
#
note 'grants of every kind under load, then pg_ctl stop -m immediate';
# Each client takes a lease of one kind or another at each step and
# releases the one of the step before: exclusive and shared leases on the
# names k:0..k:3, permits of semaphores of 3 on m:0 and m:1.  psql prints a
# line for each acknowledged grant.
my $clients = 4;
my $steps = 4000;
my (@harness, @out);
for my $cl (1 .. $clients)
{
	my $script = "\\set ON_ERROR_STOP 1\n";
	my $prev;
	for my $i (1 .. $steps)
	{
		my $kind = ('x', 's', 'm')[ ($i * 7 + $cl) % 3 ];
		my $name = $kind eq 'm' ? 'm:' . ($i % 2) : 'k:' . (($i + $cl) % 4);
		my $args = $kind eq 's' ? ', shared => true' : $kind eq 'm' ? ', max_holders => 3' : '';
		$script .= "SELECT dlock.release('$prev->[0]', '$prev->[1]') \\g /dev/null\n" if $prev;
		$script .= "SELECT 'G|$kind|$name|' || token FROM dlock.try_acquire('$name', '1h', 'c$cl-$i'$args) t"
		  . " WHERE t.token IS NOT NULL;\n";
		$prev = [ $name, "c$cl-$i" ];
	}
	$script .= "\\echo DONE\n";
	push @harness, psql_script($node, "client$cl", $script, \$out[$cl]);
}
$node->poll_query_until('postgres', 'SELECT last_value > 2000 FROM dlock.token_seq')
  or die 'load did not start';
$node->stop('immediate');
$_->finish foreach @harness;
$node->start;

my (%acked, %by_kind);
my ($dup, $not_growing) = (0, 0);
my $acked_max = 0;
for my $cl (1 .. $clients)
{
	my $last = 0;
	for (split /\n/, $out[$cl])
	{
		next unless /^G\|(\w)\|[^|]+\|(\d+)$/;
		$dup++ if $acked{$2}++;
		$not_growing++ if $2 <= $last;
		$last = $2;
		$by_kind{$1}++;
		$acked_max = $2 if $2 > $acked_max;
	}
}
note 'acknowledged before the crash: ' . join(', ', map { "$by_kind{$_} $_" } sort keys %by_kind)
  . ' (x exclusive, s shared, m permits)';
ok(($by_kind{x} // 0) > 0 && ($by_kind{s} // 0) > 0 && ($by_kind{m} // 0) > 0,
	'grants of every kind were acknowledged before the crash');
is(scalar(grep { /^DONE$/m } @out[1 .. $clients]), 0, 'the crash came in the middle of the load');
is($dup, 0, 'no token was acknowledged twice');
is($not_growing, 0, 'each client\'s tokens grew from grant to grant, whatever the kind');
is(sql(q{SELECT count(*) = count(DISTINCT token) FROM dlock.lease_state}), 't',
	'no token appears twice in the lease table after the crash');
my $table_max = sql('SELECT max(token) FROM dlock.lease_state');
cmp_ok($table_max, '>=', $acked_max, 'no acknowledged token is above the largest one in the table');

# Grants of each kind after the crash, into slots that other kinds used
my %next;
sql(q{SELECT dlock.force_release(n) FROM unnest(ARRAY['k:0', 'k:1', 'm:0']) n});
$next{exclusive} = sql(q{SELECT token FROM dlock.try_acquire('k:0', '1h', 'after-x')});
$next{shared} = sql(q{SELECT string_agg(token::text, ' ') FROM (
	SELECT (SELECT token FROM dlock.try_acquire('k:1', '1h', o, shared => true)) FROM unnest(ARRAY['after-s1', 'after-s2']) o) g});
$next{permit} = sql(q{SELECT string_agg(token::text, ' ') FROM (
	SELECT (SELECT token FROM dlock.try_acquire('m:0', '1h', o, max_holders => 3)) FROM unnest(ARRAY['after-m1', 'after-m2']) o) g});
for my $kind (sort keys %next)
{
	my @tokens = split / /, $next{$kind};
	ok(@tokens && !grep({ !/^\d+$/ || $_ <= $table_max || $_ <= $acked_max } @tokens),
		"$kind grants after the crash have tokens larger than every acknowledged one and every one in the table");
}
is(sql(q{SELECT count(*) = count(DISTINCT token) FROM dlock.lease_state}), 't',
	'every token in the lease table is unique');

note 'dump and restore into a new database of the same cluster';
my $dump = PostgreSQL::Test::Utils::tempdir() . '/kinds.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', 'postgres', '-f', $dump ], 'pg_dump');
sql('CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'restored', $dump ], 'pg_restore');
my $rows_sql = q{SELECT name, slot, token, owner, shared, max_holders, acquired_at, expires_at,
	       ended_at, end_reason, session_bound
	  FROM dlock.lease_state ORDER BY name, slot};
is($node->safe_psql('restored', $rows_sql), sql($rows_sql),
	'every row is restored with its slot, token, kind and limit');
is(sql(q{SELECT count(*) FILTER (WHERE slot > 0) > 0 AND count(*) FILTER (WHERE shared) > 0
	       AND count(*) FILTER (WHERE max_holders = 3) > 0 FROM dlock.lease_state}),
	't', '(the rows include slots above 0, shared leases and permits)');
my $restored_max = $node->safe_psql('restored', 'SELECT max(token) FROM dlock.lease_state');
is($node->safe_psql('restored', q{SELECT dlock.fence('k:1', token) FROM dlock.lease_state
	    WHERE name = 'k:1' AND owner = 'after-s2'}), 't', 'a restored shared lease fences true');
my $restored = $node->safe_psql('restored', q{
	SELECT (SELECT token FROM dlock.try_acquire('restored:x', '1h', 'r-x')),
	       (SELECT token FROM dlock.try_acquire('k:1', '1h', 'r-s', shared => true)),
	       (SELECT token FROM dlock.try_acquire('m:0', '1h', 'r-m', max_holders => 3)),
	       NOT EXISTS (SELECT FROM dlock.try_acquire('m:0', '1h', 'r-m2', max_holders => 3))});
my @restored = split /\|/, $restored;
ok(!grep({ !/^\d+$/ || $_ <= $restored_max } @restored[0 .. 2]),
	"the next exclusive, shared and semaphore grants are larger than every restored token ($restored_max)");
is($restored[3], 't', 'the restored permits count: the fourth permit of the semaphore of 3 is refused');

#
# Failover to a synchronous standby
#
note 'shared leases and permits survive a failover';
my ($primary, $standby) = sync_pair('kinds_primary', 'kinds_standby',
	synchronous_commit => 'remote_apply');

$primary->safe_psql('postgres', q{
	SELECT dlock.try_acquire('fo:s', '1h', o, shared => true) FROM unnest(ARRAY['s1', 's2', 's3']) o;
	SELECT dlock.try_acquire('fo:m', '1h', o, max_holders => 3) FROM unnest(ARRAY['m1', 'm2']) o;
	SELECT dlock.try_acquire('fo:x', '1h', 'x1');
});
my $fo_sql = q{SELECT name, slot, owner, token, shared, max_holders
	  FROM dlock.lease_state WHERE name LIKE 'fo:%' ORDER BY name, slot};
my $fo_rows = $primary->safe_psql('postgres', $fo_sql);
is(scalar(my @fo_list = split /\n/, $fo_rows), 6, 'three shared leases, two permits and an exclusive lease');
is($standby->safe_psql('postgres', $fo_sql), $fo_rows, 'all of them are on the synchronous standby at once');
my $fo_max = $primary->safe_psql('postgres', 'SELECT last_value FROM dlock.token_seq');
$primary->stop('immediate');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'promotion failed';

is($standby->safe_psql('postgres', $fo_sql), $fo_rows, 'after failover every holder keeps its slot and token');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM dlock.leases WHERE name LIKE 'fo:%' AND state = 'live'}),
	'6', 'and all of them are live');
is($standby->safe_psql('postgres', q{SELECT bool_and(dlock.fence(name, token)) FROM dlock.lease_state
	    WHERE name LIKE 'fo:%'}), 't', 'every one of them fences true on the new primary');
is($standby->safe_psql('postgres', q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('fo:s', '1h', 'w')),
	    NOT EXISTS (SELECT FROM dlock.try_acquire('fo:x', '1h', 'w'))}),
	't|t', 'an exclusive grant is refused while the shared leases live; so is another owner of the exclusive one');
my $fo_new = $standby->safe_psql('postgres', q{
	SELECT (SELECT token FROM dlock.try_acquire('fo:s', '1h', 's4', shared => true)),
	       (SELECT token FROM dlock.try_acquire('fo:m', '1h', 'm3', max_holders => 3)),
	       (SELECT token FROM dlock.try_acquire('fo:new', '1h', 'x2')),
	       NOT EXISTS (SELECT FROM dlock.try_acquire('fo:m', '1h', 'm4', max_holders => 3))});
my @fo_new = split /\|/, $fo_new;
ok(!grep({ !/^\d+$/ || $_ <= $fo_max } @fo_new[0 .. 2]),
	"new shared, semaphore and exclusive grants on the new primary are larger than every token before ($fo_max)");
is($fo_new[3], 't', 'the replayed permits count: a fourth permit is refused');
$standby->stop;

#
# Exclusion under churn
#
note 'churn: a semaphore of 3, readers and writers';
sql(q{CREATE TABLE entries (token bigint PRIMARY KEY, name text NOT NULL,
	                        worker int NOT NULL, role text NOT NULL)});
my $churn = PostgreSQL::Test::Utils::tempdir() . "/kinds_churn";
my $includedir = $node->config_data('--includedir');
my $libdir = $node->config_data('--libdir');
system($ENV{CC} // 'cc', '-std=c99', '-O2', '-Wall', '-Wextra', '-Werror',
	"-I$includedir", '-o', $churn, "$ENV{TESTDIR}/test/kinds_churn.c",
	"$ENV{TESTDIR}/test/lib/dlock_client.c",
	"-L$libdir", '-lpq') == 0
  or BAIL_OUT('could not compile test/kinds_churn.c');

my ($out, $err) = ('', '');
{
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local $ENV{PGDATABASE} = 'postgres';
	IPC::Run::run([ $churn, 14, 8, 1 ], '>', \$out, '2>', \$err);
}
is($?, 0, 'churn: at most 3 permits inside at once, a writer inside alone, tokens growing, no other error')
  or diag($err);
my %sum = map { $_ => 0 } qw(permits reads writes timeouts cancels cancelled overstayed);
my ($max_permits, $max_readers) = (0, 0);
for (split /\n/, $out)
{
	next unless /(\d+) permits, (\d+) reads, (\d+) writes inside; \d+ refused, (\d+) timed out, (\d+) cancels sent, (\d+) cancelled, \d+ fenced out, (\d+) overstayed; at most (\d+) permits, (\d+) readers/;
	$sum{permits} += $1;
	$sum{reads} += $2;
	$sum{writes} += $3;
	$sum{timeouts} += $4;
	$sum{cancels} += $5;
	$sum{cancelled} += $6;
	$sum{overstayed} += $7;
	$max_permits = $8 if $8 > $max_permits;
	$max_readers = $9 if $9 > $max_readers;
}
note 'churn: ' . join(', ', map { "$sum{$_} $_" } sort keys %sum)
  . "; at most $max_permits permits and $max_readers readers inside at once";
ok($sum{permits} > 0 && $sum{reads} > 0 && $sum{writes} > 0,
	'the churn went inside with permits, as readers and as writers');
ok($sum{timeouts} > 0 && $sum{cancelled} > 0, 'and had timeouts and cancelled waits');
ok($sum{overstayed} > 0, 'some stayed inside past their lease\'s expiry (the fence\'s pin held off the regrant)');
cmp_ok($max_permits, '>=', 2, 'permits were inside together (the check counts something)');
cmp_ok($max_readers, '>=', 2, 'readers were inside together');
is(sql('SELECT count(*) FROM entries'), $sum{permits} + $sum{reads} + $sum{writes},
	'every fenced write that committed is one of those counted inside');
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()})
  or die 'the churn\'s backends did not exit';
is(locks_left($node), '', 'once everyone is gone nothing is left in dlock.locks');

my $log = slurp_file($node->logfile);
unlike($log, qr/deadlock detected|\b40P01\b/, 'no deadlock was detected');
unlike($log . slurp_file($primary->logfile) . slurp_file($standby->logfile), qr/\bXX000\b/,
	'no internal error (XX000) in the server logs');

$node->stop;
done_testing();
