# Statistics with dlock preloaded (dlock.stats): exact counts of a known
# workload, reset, eviction of the least active names, survival across
# backends; entries only for names with rows, and a fair share of the table
# per database; the rate-limited log line of stale tokens checked by fence()
# (dlock.log_stale_fences), whose window the databases share; and
# dlock.locks as other sessions see a waiter and an uncommitted grant.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('stats');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.stats_max = 20
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub sql { return $node->safe_psql('postgres', @_); }

# stats(name): the counters of a name, as "column=value ..." of the nonzero ones
my @counters = qw(grants refusals renewals waits timeouts released expired
  force_released session_ended fence_ok fence_refused);
sub stats
{
	my ($name) = @_;
	my $row = sql('SELECT ' . join(", ", @counters) . " FROM dlock.stats WHERE name = '$name'");
	return '(none)' if $row eq '';
	my @v = split /\|/, $row;
	return join ' ', map { $v[$_] ? "$counters[$_]=$v[$_]" : () } 0 .. $#counters;
}

note 'a known workload gives exact counts';
is(sql(q{SELECT count(*) FROM dlock.stats}), '0', 'nothing counted before the first call');
my $t = sql(q{SELECT token FROM dlock.try_acquire('w:a', '1h', 'o1')});
sql(q{SELECT dlock.try_acquire('w:a', '1h', 'o2')});
sql(q{SELECT dlock.try_acquire('w:a', '1h', 'o1')});
sql(q{SELECT dlock.renew('w:a', 'o1', '1h')});
# one decision per transaction for many rows and repeated calls
sql(qq{SELECT count(*) FROM generate_series(1, 1000) WHERE dlock.fence('w:a', $t)});
sql(qq{SELECT dlock.fence('w:a', $t + 1000), dlock.fence('w:a', $t + 1000)});
sql(q{SELECT dlock.release('w:a', 'o1')});
sql(q{SELECT dlock.release('w:a', 'o1')});
is(stats('w:a'), 'grants=1 refusals=1 renewals=2 released=1 fence_ok=1 fence_refused=1',
	'grant, refusal, renewals, fence decisions, release');

# A rolled-back grant is counted: these are attempts
sql(q{BEGIN; SELECT dlock.try_acquire('w:rollback', '1h', 'o'); ROLLBACK;});
is(stats('w:rollback'), 'grants=1', 'a rolled-back grant counts');

# Waits: one that gets the lease after its expiry (the grant over the
# expired lease counts it), one that times out
sql(q{SELECT dlock.try_acquire('w:b', '300ms', 'o1')});
sql(q{SELECT dlock.acquire('w:b', '1h', 'o2', timeout => '10s')});
sql(q{SELECT dlock.try_acquire('w:c', '1h', 'o1')});
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT dlock.acquire('w:c', '1h', 'o2', timeout => '200ms')});
like($err, qr/could not acquire lease "w:c" within the timeout/, 'the wait timed out');
sql(q{SELECT dlock.force_release('w:c')});
is(stats('w:b'), 'grants=2 waits=1 expired=1', 'a wait, and the expiry found by the next grant');
is(stats('w:c'), 'grants=1 waits=1 timeouts=1 force_released=1', 'a timed-out wait and a force_release');
my ($total, $max) = split /\|/, sql(q{SELECT wait_time_total_ms, wait_time_max_ms
	FROM dlock.stats WHERE name = 'w:b'});
ok($total >= 100 && $total < 10000 && $max == $total,
	"the wait time is measured (${total} ms)");
($total) = split /\|/, sql(q{SELECT wait_time_total_ms FROM dlock.stats WHERE name = 'w:c'});
ok($total >= 150, "a timed-out wait's time counts too (${total} ms)");

# An expiry found by the holder's own renew is counted once, also when a
# grant later finds the same expired lease
sql(q{SELECT dlock.try_acquire('w:e', '100ms', 'o1')});
sql(q{SELECT pg_sleep(0.2)});
is(sql(q{SELECT dlock.renew('w:e', 'o1', '1h') IS NULL}), 't', 'renew of an expired lease fails');
sql(q{SELECT dlock.release('w:e', 'o1')});
sql(q{SELECT dlock.try_acquire('w:e', '1h', 'o2')});
is(stats('w:e'), 'grants=2 expired=1', 'one expiry, counted once');

# A session-bound holder that exits: found by the next grant
my $bg = $node->background_psql('postgres');
$bg->query_safe(q{SELECT dlock.try_acquire('w:d', '1h', 'o1', session_bound => true)});
$bg->quit;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM dlock.locks WHERE kind = 'session'}) or die;
sql(q{SELECT dlock.try_acquire('w:d', '1h', 'o2')});
is(stats('w:d'), 'grants=2 session_ended=1', 'a session end found by the next grant');

note 'statistics survive the backends that made them, per database';
# every sql() above was its own backend; another database sees none of it
sql('CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION dlock');
is($node->safe_psql('other', 'SELECT count(*) FROM dlock.stats'), '0',
	'another database has its own statistics');
$node->safe_psql('other', q{SELECT dlock.try_acquire('w:a', '1h', 'x')});
is($node->safe_psql('other', q{SELECT grants FROM dlock.stats WHERE name = 'w:a'}), '1',
	'the same name in another database is counted apart');

note 'the stale-fence log line';
# At most one line per name every 10 s (STALE_LOG_INTERVAL_S), however many
# stale checks; the next line says how many were not logged.  One line per
# event: no STATEMENT, CONTEXT or DETAIL line after it.
my $window = 10;
sql(q{SELECT dlock.try_acquire('s:x', '100ms', 'old')});
my $old = sql(q{SELECT token FROM dlock.leases WHERE name = 's:x'});
sql(q{SELECT pg_sleep(0.15)});
my $new = sql(q{SELECT token FROM dlock.try_acquire('s:x', '1h', 'new')});
my $other = sql(q{SELECT token FROM dlock.leases WHERE name = 'w:a'});
sql(q{CREATE TABLE acct (id int, v int); INSERT INTO acct SELECT g, 0 FROM generate_series(1, 100) g});

# the lines of the log since $offset that say a stale token was checked
sub stale_lines
{
	my ($offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	my @lines = ($log =~ /(dlock\.fence\(\) returned false for stale token [^\n]*)/g);
	return @lines;
}
sub count_stale
{
	my @lines = stale_lines(@_);
	return scalar @lines;
}
# the log line after each such line
sub after_stale_lines
{
	my ($offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	return ($log =~ /dlock\.fence\(\) returned false for stale token [^\n]*\n([^\n]*)/g);
}

my $offset = -s $node->logfile;
sql(qq{BEGIN;
	UPDATE acct SET v = 1 WHERE dlock.fence('s:x', $old);
	UPDATE acct SET v = 2 WHERE id % 2 = 0 AND dlock.fence('s:x', $old);
	SELECT dlock.try_acquire('s:unrelated', '1h', 'o');
	UPDATE acct SET v = 3 WHERE dlock.fence('s:x', $old);
	COMMIT;});
my $first_line_at = time;	# no earlier than the line
# 20 more decisions, each in a transaction of its own
sql(join '', map { "SELECT dlock.fence('s:x', $old);\n" } 1 .. 20);
my @lines = stale_lines($offset);
is(scalar @lines, 1, 'one line in the window, over rows, statements, a lease change and 20 transactions');
like($lines[0] // '',
	qr/^dlock\.fence\(\) returned false for stale token $old of lease "s:x": current token $new, lease $old expired \d+\.\d s ago$/,
	'the line says what happened: a stale token checked, the current token, the time since expiry');
my @after = after_stale_lines($offset);
ok(@after == 1 && $after[0] !~ /\b(STATEMENT|CONTEXT|DETAIL):/,
	'one line per event: no STATEMENT line follows it');

# Tokens never granted for the name: another name's token, a future token;
# a name never granted
$offset = -s $node->logfile;
sql(qq{SELECT dlock.fence('s:x', $other), dlock.fence('s:x', $new + 1000),
	dlock.fence('s:never', $old)});
is(count_stale($offset), 0, 'never for a token that was not granted for the name');
is(stats('s:never'), '(none)', 'and a name never granted gets no statistics');

# The current token, once its lease ended; from PL/pgSQL, still one line
my $y = sql(q{SELECT token FROM dlock.try_acquire('s:y', '1h', 'new')});
sql(q{SELECT dlock.release('s:y', 'new')});
$offset = -s $node->logfile;
sql(qq{DO \$\$ BEGIN PERFORM dlock.fence('s:y', $y); END \$\$});
@lines = stale_lines($offset);
like($lines[0] // '', qr/^dlock\.fence\(\) returned false for stale token $y of lease "s:y": no live lease, lease $y was released \d+\.\d s ago$/,
	'a released current token');
@after = after_stale_lines($offset);
ok(@after == 1 && $after[0] !~ /\b(STATEMENT|CONTEXT|DETAIL):/,
	'no CONTEXT line from PL/pgSQL either');

my $z = sql(q{SELECT token FROM dlock.try_acquire('s:z', '1h', 'new')});
sql(q{SELECT dlock.release('s:z', 'new')});
$offset = -s $node->logfile;
sql(qq{SET dlock.log_stale_fences = off; SELECT dlock.fence('s:z', $z)});
is(count_stale($offset), 0, 'dlock.log_stale_fences = off logs nothing');
# 2 decisions in the first transaction (the lease change emptied the fence
# cache), 20 in the next ones, 2 for tokens not of s:x: all counted
is(stats('s:x'), 'grants=2 expired=1 fence_refused=24',
	'every decision is counted, logged or not');

# After the window: the next line, with the 21 checks that were not logged
sleep(0.1) while time < $first_line_at + $window + 0.2;
$offset = -s $node->logfile;
sql(qq{SELECT dlock.fence('s:x', $old)});
@lines = stale_lines($offset);
like($lines[0] // '', qr/^dlock\.fence\(\) returned false for stale token $old of lease "s:x": .*; stale checks not logged meanwhile: 21 of this lease$/,
	'after the window, the next line says how many checks were not logged');

# Many names at once: at most 64 lines (STALE_LOG_NAMES) in a window
sql(q{CREATE TABLE flood AS SELECT i, (SELECT token FROM dlock.try_acquire('f:' || i, '1h', 'o')) FROM generate_series(1, 100) i});
sql(q{SELECT dlock.release('f:' || i, 'o') FROM flood});
$offset = -s $node->logfile;
sql(q{SELECT count(*) FROM flood WHERE dlock.fence('f:' || i, token)});
my $flood_at = time;
my $logged = count_stale($offset);
ok($logged >= 50 && $logged < 64, "100 names checked at once: $logged lines, not 100");
sleep(0.1) while time < $flood_at + $window + 0.2;
$offset = -s $node->logfile;
sql(qq{SELECT dlock.fence('s:y', $y)});
@lines = stale_lines($offset);
my $unlogged = 100 - $logged;
like($lines[0] // '', qr/; stale checks not logged meanwhile: $unlogged of other leases$/,
	'the next line counts the names that were not logged');
# the flood's entries would crowd out the names the next tests count
sql('SELECT dlock.stats_reset()');

note 'dlock.locks, seen from another session';
sql(q{SELECT dlock.try_acquire('l:x', '100ms', 'first'); SELECT pg_sleep(0.15)});
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN});
$holder->query_safe(q{SELECT dlock.try_acquire('l:x', '1h', 'h')});
$holder->query_safe(q{SELECT dlock.try_acquire('l:first-grant', '1h', 'h')});
my $holder_pid = $holder->query_safe(q{SELECT pg_backend_pid()});
chomp $holder_pid;
my $waiter = $node->background_psql('postgres');
my $waiter_pid = $waiter->query_safe(q{SELECT pg_backend_pid()});
chomp $waiter_pid;
$waiter->query_until(qr/started/, q{\echo started
SELECT owner FROM dlock.acquire('l:x', '1h', 'w', timeout => '1min');
});
$node->poll_query_until('postgres',
	qq{SELECT count(*) = 1 FROM dlock.locks WHERE pid = $waiter_pid AND NOT granted})
  or die 'the waiter did not wait';
is(sql(qq{SELECT string_agg(kind || ' ' || coalesce(name, '(unknown)') || ' ' || mode, ', ' ORDER BY name, mode)
	FROM dlock.locks WHERE pid = $holder_pid AND granted}),
	'name l:x AccessExclusiveLock, name l:x ShareRowExclusiveLock, name (unknown) AccessExclusiveLock, name (unknown) ShareRowExclusiveLock',
	'the uncommitted grant of l:x; a first grant has no committed name yet');
is(sql(qq{SELECT string_agg(kind || ' ' || name || ' ' || mode || ' ' || granted || ' ' || (waitstart IS NOT NULL), ', ' ORDER BY kind)
	FROM dlock.locks WHERE pid = $waiter_pid}),
	'name l:x ShareRowExclusiveLock false true, queue l:x ExclusiveLock true false',
	'the waiter: head of the queue, waiting for the name since waitstart');
$holder->query_safe(q{COMMIT});
$holder->query_safe(q{SELECT dlock.release('l:x', 'h')});
$waiter->query_safe(q{\echo done});
$node->poll_query_until('postgres',
	q{SELECT owner = 'w' FROM dlock.leases WHERE name = 'l:x'}) or die;
$holder->quit;
$waiter->quit;
is(stats('l:x'), 'grants=3 waits=1 released=1 expired=1', 'and its statistics');

note 'reset, and who may reset';
sql('CREATE ROLE plain LOGIN');
($ret, $out, $err) = $node->psql('postgres', 'SELECT dlock.stats_reset()',
	extra_params => [ '-U', 'plain' ]);
like($err, qr/permission denied for function stats_reset/, 'not for every role');
is($node->safe_psql('postgres', q{SELECT count(*) > 0 FROM dlock.stats}, extra_params => [ '-U', 'plain' ]),
	't', 'but every role may read them');
sql('SELECT dlock.stats_reset()');
is(sql('SELECT count(*) FROM dlock.stats'), '0', 'reset forgets this database');
is($node->safe_psql('other', 'SELECT count(*) FROM dlock.stats'), '1', 'and only this one');
sql(q{SELECT dlock.try_acquire('w:a', '1h', 'o3')});
is(stats('w:a'), 'grants=1', 'counting starts again from zero');

note 'entries only for names with rows, and a fair share per database (dlock.stats_max = 20)';
sql('SELECT dlock.stats_reset()');
$node->safe_psql('other', 'SELECT dlock.stats_reset()');
sql(q{SELECT dlock.try_acquire('a:' || i, '1h', 'o') FROM generate_series(1, 5) i});
sql(q{SELECT count(*) FROM generate_series(1, 500) i WHERE dlock.fence('junk:' || i, i)});
is(sql(q{SELECT string_agg(name, ' ' ORDER BY name) FROM dlock.stats}), 'a:1 a:2 a:3 a:4 a:5',
	'fence() on names never granted makes no entry');
# A set refused because a:1 is held: the refusal is counted on the set's
# first name in lock order, almost surely one of the 20 never granted
is(sql(q{SELECT count(*) FROM dlock.try_acquire_all(ARRAY['a:1'] ||
	ARRAY(SELECT 'junk-set:' || i FROM generate_series(1, 20) i), '1h', 'p')}), '0',
	'a set with a held name is refused');
is(sql(q{SELECT count(*) FROM dlock.stats WHERE name LIKE 'junk-set:%'}), '0',
	'nor does a refusal on names never granted');
# A name with rows but no entry (reset since) gets one from a fence
sql(q{SELECT dlock.fence('w:a', 1)});
is(stats('w:a'), 'fence_refused=1', 'a fence of a name that has rows makes its entry');

# Database other floods: junk fences, then 200 real grants of 200 names
$node->safe_psql('other', q{SELECT count(*) FROM generate_series(1, 2000) i WHERE dlock.fence('junk:' || i, i)});
is($node->safe_psql('other', 'SELECT count(*) FROM dlock.stats'), '0',
	'the junk fences of another database make no entry');
$node->safe_psql('other', q{SELECT dlock.try_acquire('b:' || i, '1h', 'o') FROM generate_series(1, 200) i});
is(sql(q{SELECT string_agg(name || '=' || grants, ' ' ORDER BY name) FROM dlock.stats WHERE name LIKE 'a:%'}),
	'a:1=1 a:2=1 a:3=1 a:4=1 a:5=1', 'a flood of grants in another database evicts none of this one');
my $b = $node->safe_psql('other', 'SELECT count(*) FROM dlock.stats');
ok($b >= 10 && $b + 6 <= 20, "the other database keeps its share and the rest ($b entries)");
# Under its share (10 of 20 with two databases), this one takes room back
sql(q{SELECT dlock.try_acquire('a2:' || i, '1h', 'o') FROM generate_series(1, 4) i});
is(sql(q{SELECT count(*) FROM dlock.stats}), '10', 'a database under its share gets its entries');
$b = $node->safe_psql('other', 'SELECT count(*) FROM dlock.stats');
ok($b >= 9 && $b <= 10, "from the database over its share ($b entries)");

note 'eviction keeps the most active names (dlock.stats_max = 20)';
sql('SELECT dlock.stats_reset()');
$node->safe_psql('other', 'SELECT dlock.stats_reset()');
sql(q{SELECT dlock.try_acquire('hot:' || i, '1h', 'o') FROM generate_series(1, 5) i,
	generate_series(1, 30)});
sql(q{SELECT dlock.try_acquire('cold:' || i, '1h', 'o') FROM generate_series(1, 200) i});
is(sql(q{SELECT count(*) FROM dlock.stats WHERE name LIKE 'hot:%'}), '5', 'the hot names stay');
is(sql(q{SELECT grants || ' ' || renewals FROM dlock.stats WHERE name = 'hot:3'}), '1 29',
	'with their counts');
ok(sql(q{SELECT count(*) FROM dlock.stats}) <= 20, 'at most dlock.stats_max names are kept');
ok(sql(q{SELECT count(*) FROM dlock.stats WHERE name LIKE 'cold:%'}) >= 1, 'the newest cold names are there');

note 'a restart clears them';
$node->restart;
is(sql('SELECT count(*) FROM dlock.stats'), '0', 'nothing survives a restart');

# The window of the stale-fence line (STALE_LOG_NAMES = 64 names) is shared
# by the databases: a role flooding one database with stale checks of its
# own names cannot keep another database's stale fences out of the log.
# The restart above left the window empty.  Database other floods (a plain
# role, its own leases), database postgres has a few stale names.
note 'the stale-fence window, shared between databases';
$node->safe_psql('other', q{SELECT dlock.try_acquire('sa:' || i, '1h', 'o'), dlock.release('sa:' || i, 'o')
	FROM generate_series(1, 100) i}, extra_params => [ '-U', 'plain' ]);
sql(q{SELECT dlock.try_acquire('sb:' || i, '1h', 'o'), dlock.release('sb:' || i, 'o')
	FROM generate_series(0, 40) i});

# fence every released lease whose name matches $like, in $db; the rows are
# read first, so that fence() sees no other lease
sub fence_all
{
	my ($db, $like) = @_;
	$node->safe_psql($db, qq{WITH l AS MATERIALIZED (SELECT name, token FROM dlock.leases
			WHERE name LIKE '$like')
		SELECT count(*) FROM l WHERE dlock.fence(name, token)},
		extra_params => [ '-U', 'plain' ]);
}
# the lease names of the stale-fence lines since $offset that start with $prefix
sub stale_names
{
	my ($offset, $prefix) = @_;
	return map { /of lease "(\Q$prefix\E[^"]*)"/ ? $1 : () } stale_lines($offset);
}

my $start = -s $node->logfile;
fence_all('postgres', 'sb:0');
my $b0_at = time;			# no earlier than sb:0's line
sleep(0.1) while time < $b0_at + 5;
$offset = -s $node->logfile;
my $sa_at = time;		# no later than the flood's lines
fence_all('other', 'sa:%');
is(scalar(stale_names($offset, 'sa:')), 63,
	'a flood of 100 stale names in one database: 63 lines, all the free window');
$offset = -s $node->logfile;
fence_all('postgres', 'sb:1');
is(join(' ', stale_names($offset, 'sb:')), 'sb:1',
	'a stale fence of another database within the window is logged by name');
$offset = -s $node->logfile;
fence_all('other', 'sa:%');
is(count_stale($offset), 0, 'the flooding database, over its share, logs no more names');
$offset = -s $node->logfile;
fence_all('postgres', 'sb:%');
my @b = stale_names($offset, 'sb:');
is(scalar(@b) . ' ' . scalar(grep { $_ eq 'sb:0' || $_ eq 'sb:1' } @b), '30 0',
	'the other database logs new names up to its share, 32 of 64, and no name twice');
ok(time < $b0_at + $window, 'these checks ran within the window of sb:0');

# sb:0's 10 s are over: its slot is free, while the flood's names are still
# in their window.  A name of the flood whose slot was taken must not be
# logged again before its 10 s are over.
sleep(0.1) while time < $b0_at + $window + 0.2;
$offset = -s $node->logfile;
fence_all('other', 'sa:%');
is(count_stale($offset), 0,
	'a database that gave up a slot logs no name until that name\'s 10 s are over');
my %seen;
my @twice = grep { $seen{$_}++ } stale_names($start, 'sa:');
is("@twice", '', 'no name of the flood was logged twice in its window');
$offset = -s $node->logfile;
fence_all('postgres', 'sb:0');
like(join("\n", stale_lines($offset)),
	qr/^dlock\.fence\(\) returned false for stale token \d+ of lease "sb:0": .*; stale checks not logged meanwhile: 1 of this lease, \d+ of other leases$/,
	'after its 10 s, a name of the other database is logged again');
ok(time < $sa_at + $window, 'and the flood\'s names were still in their window');

# With 1000 entries a pass evicts 50 at once, chosen by a partial selection
# of the least used: the busy names, each used far more than any idle one,
# must never be among them
note 'eviction of many entries at once keeps the most active names (dlock.stats_max = 1000)';
$node->append_conf('postgresql.conf', "dlock.stats_max = 1000\n");
$node->restart;
sql(q{SELECT dlock.try_acquire('busy:' || i, '1h', 'o') FROM generate_series(1, 40) i,
	generate_series(1, 10)});
sql(q{SELECT dlock.try_acquire('idle:' || i, '1h', 'o') FROM generate_series(1, 3000) i});
is(sql(q{SELECT count(*) FROM dlock.stats WHERE name LIKE 'busy:%' AND renewals = 9}), '40',
	'the 40 busy names stay, with their counts');
my $kept = sql(q{SELECT count(*) FROM dlock.stats});
ok($kept <= 1000 && $kept > 900, "at most dlock.stats_max names are kept ($kept)");
is(sql(q{SELECT count(*) FROM dlock.stats WHERE name = 'idle:3000'}), '1', 'the newest idle name is there');

$node->stop;
done_testing();
