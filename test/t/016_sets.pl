# Sets and watching under load and across a crash.
#
# A churn of overlapping sets and single leases (test/set_churn.c: sixteen
# workers, acquire_all, try_acquire_all, acquire and try_acquire over twelve
# names, random timeouts and cancels): every call holds all of its names or
# none, one holder per name at a time under the fence, tokens growing per
# name, no deadlock and no other error; afterwards nothing is left in
# dlock.locks.  Then a crash: a set granted after it gets a token larger than
# every acknowledged one (it waits out the leases whose lazy releases the
# crash lost).  Then watchers: twenty of them are woken by one
# commit, before the one-second safety-net read could have found it, and
# the exit of a session-bound holder wakes a watcher too.  Last, 600 calls
# of the set functions, watch and the value argument with random bad
# input: only documented SQLSTATEs, and a failed call changes nothing.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use DlockTest qw(background_query locks_left);

my $node = PostgreSQL::Test::Cluster->new('sets');
$node->init;
$node->append_conf('postgresql.conf', "max_connections = 60\nmax_prepared_transactions = 2\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION dlock;
	CREATE TABLE churn (name text PRIMARY KEY, inside int NOT NULL DEFAULT 0,
	                    last_token bigint NOT NULL DEFAULT 0);
	INSERT INTO churn (name) SELECT 'n' || i FROM generate_series(1, 12) i;
});

#
# The churn
#
my $churn = PostgreSQL::Test::Utils::tempdir() . "/set_churn";
my $includedir = $node->config_data('--includedir');
my $libdir = $node->config_data('--libdir');
system($ENV{CC} // 'cc', '-std=c99', '-O2', '-Wall', '-Wextra', '-Werror',
	"-I$includedir", '-o', $churn, "$ENV{TESTDIR}/test/set_churn.c",
	"$ENV{TESTDIR}/test/lib/dlock_client.c",
	"-L$libdir", '-lpq') == 0
  or BAIL_OUT('could not compile test/set_churn.c');

my ($out, $err) = ('', '');
{
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local $ENV{PGDATABASE} = 'postgres';
	IPC::Run::run([ $churn, 16, 10, 12, 1 ], '>', \$out, '2>', \$err);
}
is($?, 0, 'churn: every call held all of its names or none, one holder per name, tokens growing')
  or diag($err);
my ($sets, $singles, $timeouts, $cancels) = (0, 0, 0, 0);
for (split /\n/, $out)
{
	next unless /(\d+) sets, (\d+) singles granted; \d+ refused, (\d+) timed out, (\d+) cancels/;
	($sets, $singles, $timeouts, $cancels) =
	  ($sets + $1, $singles + $2, $timeouts + $3, $cancels + $4);
}
note "churn: $sets sets and $singles single leases granted, $timeouts timeouts, $cancels cancels sent";
ok($sets > 0 && $singles > 0 && $timeouts > 0 && $cancels > 0,
	'the churn granted sets and single leases, and had timeouts and cancels');
is(locks_left($node), '', 'nothing is left in dlock.locks');
is($node->safe_psql('postgres', 'SELECT sum(inside) FROM churn'), '0', 'nobody is left inside');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM dlock.leases WHERE owner LIKE 'churn-%' AND state = 'live'}),
	'0', 'every lease of the churn was released');
my $log = slurp_file($node->logfile);
unlike($log, qr/deadlock detected/, 'no deadlock was detected');

#
# A crash: the next set's token is larger than every acknowledged one
#
my $max_acked = $node->safe_psql('postgres', 'SELECT max(last_token) FROM churn');
$node->stop('immediate');
$node->start;
# (a release that the crash lost leaves its lease live until its ttl, 10 s:
# the set waits for those)
my $after = $node->safe_psql('postgres',
	q{SELECT min(token) || ' ' || count(DISTINCT token)
	    FROM dlock.acquire_all(ARRAY['n1', 'n2', 'n3'], '1min', 'after-crash', timeout => '30s')});
my ($after_token, $after_tokens) = split / /, $after;
is($after_tokens, '1', 'after the crash a set is granted under one token');
cmp_ok($after_token, '>', $max_acked,
	"which is larger than every token acknowledged before the crash ($max_acked)");

#
# Watchers are woken by the commit
#
my @watchers;
for my $i (1 .. 20)
{
	push @watchers, background_query($node, q{SELECT 'woken-' || dlock.watch('leader', NULL, '30s');});
}
$node->poll_query_until('postgres', q{SELECT count(*) = 20 FROM dlock.locks
	WHERE kind = 'watch' AND mode = 'AccessShareLock' AND granted})
  or die 'watchers did not start (dlock.locks shows each as kind watch)';
# let them settle into their sleep, so that only a wake-up ends it early
sleep 0.3;
my $start = time;
my $token = $node->safe_psql('postgres', q{SELECT token FROM dlock.acquire('leader', '1min', 'n1', value => 'n1:5432')});
my $all = 1;
for my $w (@watchers)
{
	$all = 0 unless $w->query_until(qr/woken-\d+/, '') =~ /woken-$token/;
}
my $elapsed = time - $start;
ok($all, 'all 20 watchers report the committed token');
note sprintf('the last watcher returned %.0f ms after the grant', $elapsed * 1000);
cmp_ok($elapsed, '<', 0.8, 'woken by the commit, not by the one-second safety-net read');
$_->quit for @watchers;
is(locks_left($node), '', 'the watchers left nothing in dlock.locks');

# The exit of a session-bound holder wakes a watcher at once
my $holder = $node->background_psql('postgres');
my $held = $holder->query_safe(
	q{SELECT token FROM dlock.try_acquire('sb', '1h', 'h', session_bound => true)});
my $pid = $holder->query_safe('SELECT pg_backend_pid()');
my $watcher = background_query($node,
	qq{SELECT 'woken-' || coalesce(dlock.watch('sb', $held, '30s')::text, 'none');});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.locks WHERE kind = 'watch'})
  or die 'watcher did not start';
sleep 0.3;
$start = time;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid, 10000)");
like($watcher->query_until(qr/woken-/, ''), qr/woken-none/,
	'the exit of a session-bound holder ends the watch: no lease is live');
$elapsed = time - $start;
cmp_ok($elapsed, '<', 0.8, 'at once, not at the safety-net read');
$watcher->quit;
eval { $holder->quit };

#
# Two-phase commit: a set granted by a prepared transaction holds its names
# until COMMIT PREPARED, from another backend; a watcher is woken at PREPARE,
# then waits for the prepared transaction, and reports the grant once it is
# committed
#
$watcher = background_query($node,
	q{SELECT 'woken-' || coalesce(dlock.watch('tp:a', NULL, '30s')::text, 'none');});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.locks WHERE kind = 'watch'})
  or die 'watcher did not start';
$node->safe_psql('postgres', q{BEGIN;
	SELECT count(*) FROM dlock.try_acquire_all(ARRAY['tp:a', 'tp:b'], '1h', 'preparer');
	PREPARE TRANSACTION 'set_grant';});
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM dlock.try_acquire_all(ARRAY['tp:b', 'tp:c'], '1h', 'other')}),
	'0', 'a prepared set holds its names: another set with one of them is refused');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.leases WHERE name LIKE 'tp:%'}),
	'0', 'and nothing of it is visible before COMMIT PREPARED');
$node->safe_psql('postgres', q{COMMIT PREPARED 'set_grant'});
my $tp_token = $node->safe_psql('postgres',
	q{SELECT min(token) || ' ' || count(DISTINCT token) || ' ' || count(*)
	    FROM dlock.leases WHERE name LIKE 'tp:%' AND state = 'live' AND owner = 'preparer'});
like($tp_token, qr/^\d+ 1 2$/, 'COMMIT PREPARED from another backend makes the whole set live, under one token');
my ($tp_first) = split / /, $tp_token;
like($watcher->query_until(qr/woken-/, ''), qr/woken-$tp_first/,
	'the watcher reports the committed grant of the prepared set');
$watcher->quit;
is(locks_left($node), '', 'nothing is left in dlock.locks');

#
# Bad input at random: the set functions, values and watch with arrays and
# arguments of every shape; every error has a documented SQLSTATE, the
# backend lives on, and a failed call changes neither the lease table nor
# the token counter
#
srand(1313);
sub rand_text
{
	my $len = any_len();
	my $text = join '', map { chr(any_of(0x61 + int(rand(26)), 0xe9, 0x20ac, 0x1f600, 0x41)) } 1 .. $len;
	utf8::encode($text);		# psql gets UTF-8 bytes
	return $text;
}
sub any_of { return $_[ int(rand(@_)) ]; }
sub any_len { return any_of(0, 1, 2, 5, 40, 255, 256, 257, 1023, 1024, 1025, 3000); }
sub lit
{
	my ($v) = @_;
	return 'NULL' unless defined $v;
	$v =~ s/'/''/g;
	return "'$v'";
}
sub rand_name { return rand() < 0.5 ? any_of('f1', 'f2', 'f3', 'f4') : rand() < 0.1 ? undef : rand_text(); }
sub rand_array
{
	my $r = rand();
	return 'NULL::text[]' if $r < 0.05;
	return q{'{}'::text[]} if $r < 0.1;
	return q{ARRAY[['f1', 'f2'], ['f3', 'f4']]} if $r < 0.13;
	my $n = $r < 0.2 ? 60 + int(rand(10)) : 1 + int(rand(5));
	return 'ARRAY[' . join(', ', map { lit(rand_name()) } 1 .. $n) . ']::text[]';
}
sub rand_interval { return any_of('NULL', q{'0'}, q{'-1s'}, q{'10ms'}, q{'1 min'}, q{'1 mon'}, q{'2 days'}, q{'100000000 days'}); }
sub rand_owner { return any_of('NULL', lit(''), lit('o1'), lit('o2'), lit('x' x 257), lit(rand_text())); }

my @calls;
for my $i (1 .. 600)
{
	my $k = int(rand(6));
	push @calls,
	    $k == 0 ? 'SELECT count(*) FROM dlock.try_acquire_all(' . rand_array() . ', ' . rand_interval() . ', ' . rand_owner() . ')'
	  : $k == 1 ? 'SELECT count(*) FROM dlock.acquire_all(' . rand_array() . ', ' . rand_interval() . ', ' . rand_owner() . q{, '0')}
	  : $k == 2 ? 'SELECT dlock.release_all(' . rand_array() . ', ' . rand_owner() . ')'
	  : $k == 3 ? 'SELECT dlock.watch(' . lit(rand_name()) . ', ' . any_of('NULL', '1', '-1', '9223372036854775807') . q{, '0'::interval)}
	  : $k == 4 ? 'SELECT token FROM dlock.try_acquire(' . lit(rand_name()) . q{, '1 min', } . rand_owner() . ', value => ' . lit(rand() < 0.8 ? rand_text() : undef) . ')'
	  :           'SELECT token FROM dlock.renew(' . lit(rand_name()) . ', ' . rand_owner() . q{, '1 min', } . lit(rand_text()) . ')';
}
$node->safe_psql('postgres', q{
	CREATE FUNCTION fuzz_call(stmt text) RETURNS text LANGUAGE plpgsql AS $$
	DECLARE
	  before text;
	  after text;
	  state text := 'ok';
	BEGIN
	  SELECT md5(string_agg(s::text, ',' ORDER BY s.name)) || (SELECT last_value FROM dlock.token_seq)
	    INTO before FROM dlock.lease_state s;
	  BEGIN
	    EXECUTE stmt;
	  EXCEPTION WHEN OTHERS THEN
	    state := SQLSTATE;
	  END;
	  SELECT md5(string_agg(s::text, ',' ORDER BY s.name)) || (SELECT last_value FROM dlock.token_seq)
	    INTO after FROM dlock.lease_state s;
	  RETURN state || CASE WHEN state <> 'ok' AND before IS DISTINCT FROM after THEN ' changed' ELSE '' END;
	END $$;
});
my %outcomes;
my @bad;
for my $stmt (@calls)
{
	my ($ok, $out, $err) = $node->psql('postgres', 'SELECT fuzz_call(' . lit($stmt) . ')');
	my $outcome = $ok == 0 ? $out : "psql failed: $err";
	$outcomes{$outcome}++;
	push @bad, "$outcome: $stmt"
	  unless $outcome =~ /^(ok|22004|22023|55P03)$/;
}
note 'outcomes: ' . join(', ', map { "$_ $outcomes{$_}" } sort keys %outcomes);
is(scalar(@bad), 0, 'random bad input: only documented SQLSTATEs (22004, 22023, 55P03), and a failed call changes nothing')
  or diag join("\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server lives on');

$node->stop;
done_testing();
