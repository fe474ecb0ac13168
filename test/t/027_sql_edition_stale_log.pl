# The stale-fence log line of the SQL edition (sql-edition/dlock.sql,
# dlock._stale_report): the C edition's wording, and its rate limit when it
# is not preloaded, each backend's own (test/t/014_stats.pl checks the C
# edition's, with the window in shared memory).
#
# fence() answering false for the token of a lease of the name that is no
# longer live (expired, released, force-released) logs one line, at most
# one per name every 10 s in a backend and 64 names in a window; the next
# line of a name says how many checks were not logged meanwhile, of this
# lease and of others.  Nothing is logged for a token the name's rows do
# not hold (another name's, a future one, a superseded one: the SQL edition
# keeps no older tokens), for a name never granted, or with
# dlock.log_stale_fences = off.  The window is a setting, so a rolled-back
# transaction takes it back.  PL/pgSQL adds a CONTEXT line to the line.
#
# The edition is installed by the database's owner, a plain role, and used
# by another plain role, as on a managed service.  DLOCK_SQL_EDITION_SCRIPT
# names another script to install instead of sql-edition/dlock.sql.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use DlockTest qw(sql_edition_install);

my $window = 10;    # seconds, as in the C edition (STALE_LOG_INTERVAL_S)

my $node = PostgreSQL::Test::Cluster->new('sql_stale_log');
$node->init;
$node->append_conf('postgresql.conf', 'max_prepared_transactions = 2');
$node->start;
sql_edition_install($node, 'app', 'regress_owner', 'regress_app');
$node->safe_psql('app', q{CREATE TABLE acct (id int, v int);
	INSERT INTO acct SELECT g, 0 FROM generate_series(1, 100) g;
	ALTER TABLE acct OWNER TO regress_app});

# One psql session of regress_app runs $script: one backend, so one window
sub app_session
{
	my ($script) = @_;
	return $node->safe_psql('app', $script, extra_params => [ '-U', 'regress_app' ]);
}

# The stale-fence lines of the log since $offset, and the line after each
sub stale_lines
{
	my ($offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	return ($log =~ /(dlock\.fence\(\) returned false for stale token [^\n]*)/g);
}
sub after_stale_lines
{
	my ($offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	return ($log =~ /dlock\.fence\(\) returned false for stale token [^\n]*\n([^\n]*)/g);
}

note 'one line per name in a window, in one backend';
my $offset = -s $node->logfile;
my $t0 = time;
my $out = app_session(q{
SELECT token AS x FROM dlock.try_acquire('s:x', '100ms', 'old') \gset
SELECT pg_sleep(0.15);
BEGIN;
UPDATE acct SET v = 1 WHERE dlock.fence('s:x', :x);
UPDATE acct SET v = 2 WHERE id % 2 = 0 AND dlock.fence('s:x', :x);
SELECT FROM dlock.try_acquire('s:unrelated', '1h', 'o');
UPDATE acct SET v = 3 WHERE dlock.fence('s:x', :x);
COMMIT;
} . join('', map { "SELECT dlock.fence('s:x', :x);\n" } 1 .. 20) . q{
-- tokens the name's rows do not hold, a name never granted
SELECT token AS other FROM dlock.try_acquire('s:other', '1h', 'o') \gset
SELECT dlock.fence('s:x', :other), dlock.fence('s:x', :x + 1000), dlock.fence('s:never', :x);
-- a superseded token: the name granted again
SELECT token AS w FROM dlock.try_acquire('s:w', '100ms', 'a') \gset
SELECT pg_sleep(0.15);
SELECT FROM dlock.try_acquire('s:w', '1h', 'b');
SELECT dlock.fence('s:w', :w);
-- released, force-released
SELECT token AS y FROM dlock.try_acquire('s:y', '1h', 'a') \gset
SELECT dlock.release('s:y', 'a');
DO $$ BEGIN PERFORM dlock.fence('s:y', (SELECT max(token) FROM dlock.leases WHERE name = 's:y')); END $$;
SELECT token AS z FROM dlock.try_acquire('s:z', '1h', 'a') \gset
SELECT dlock.force_release('s:z');
SET dlock.log_stale_fences = off;
SELECT dlock.fence('s:z', :z);
RESET dlock.log_stale_fences;
SELECT dlock.fence('s:z', :z);
-- a rolled-back transaction takes its window back
SELECT token AS r FROM dlock.try_acquire('s:r', '1h', 'a') \gset
SELECT dlock.release('s:r', 'a');
BEGIN;
SELECT dlock.fence('s:r', :r);
ROLLBACK;
SELECT dlock.fence('s:r', :r);
SELECT dlock.fence('s:r', :r);
-- so does a rollback to a savepoint
SELECT token AS sp FROM dlock.try_acquire('s:sp', '1h', 'a') \gset
SELECT dlock.release('s:sp', 'a');
BEGIN;
SAVEPOINT a;
SELECT dlock.fence('s:sp', :sp);
ROLLBACK TO SAVEPOINT a;
SELECT dlock.fence('s:sp', :sp);
COMMIT;
SELECT dlock.fence('s:sp', :sp);
-- a prepared transaction keeps it (the setting is the session's), and
-- COMMIT PREPARED from another session changes nothing of it
SELECT token AS pp FROM dlock.try_acquire('s:pp', '1h', 'a') \gset
SELECT dlock.release('s:pp', 'a');
BEGIN;
SELECT dlock.fence('s:pp', :pp);
PREPARE TRANSACTION 'stale_log';
} . "\\! psql -X -q -d '" . $node->connstr('app') . "' -c \"COMMIT PREPARED 'stale_log'\"\n" . q{
SELECT dlock.fence('s:pp', :pp);
SELECT 'tokens', :x, :y, :z, :r;
});
my ($x, $y, $z, $r) = ($out =~ /^tokens\|(\d+)\|(\d+)\|(\d+)\|(\d+)$/m)
  or die "no tokens in: $out";
my @lines = stale_lines($offset);
my @x = grep { /lease "s:x"/ } @lines;
is(scalar @x, 1, 'one line in the window, over rows, statements, a lease change and 20 transactions');
like($x[0] // '',
	qr/^dlock\.fence\(\) returned false for stale token $x of lease "s:x": no live lease, lease $x expired \d+\.\d s ago$/,
	'the line says what happened: a stale token checked, the time since expiry');
is(scalar(grep { /lease "s:(never|other|w)"/ || /token (?!$x )\d+ of lease "s:x"/ } @lines), 0,
	'never for a token the name\'s rows do not hold, nor for a name never granted');
my @yl = grep { /lease "s:y"/ } @lines;
is(scalar @yl, 1, 'a released token, checked from PL/pgSQL: one line');
like($yl[0] // '', qr/^dlock\.fence\(\) returned false for stale token $y of lease "s:y": no live lease, lease $y was released \d+\.\d s ago$/,
	'... saying how long ago it was released');
my @zl = grep { /lease "s:z"/ } @lines;
is(scalar @zl, 1, 'dlock.log_stale_fences = off logs nothing; on again, it logs');
like($zl[0] // '', qr/lease $z was force-released \d+\.\d s ago$/, 'a force-released token');
is(scalar(grep { /lease "s:r"/ } @lines), 2,
	'a rolled-back transaction takes its window back: the next check logs again, the one after does not');
is(scalar(grep { /lease "s:sp"/ } @lines), 2,
	'a rollback to a savepoint takes its window back: one line before, one after, none at commit');
is(scalar(grep { /lease "s:pp"/ } @lines), 1,
	'a prepared transaction keeps its window, committed by another session: the next check is not logged');
my @after = after_stale_lines($offset);
ok(@lines > 0 && @after == @lines && !grep({ !/^\S.*CONTEXT:  PL\/pgSQL function dlock\._stale_report/ } @after),
	'each line is followed by its CONTEXT line (PL/pgSQL\'s), and no other');

note 'after the window, the next line counts what was not logged';
$out = app_session(q{
SELECT token AS a FROM dlock.try_acquire('t:a', '1h', 'a') \gset
SELECT dlock.release('t:a', 'a');
} . join('', map { "SELECT dlock.fence('t:a', :a);\n" } 1 .. 22) . qq{
SELECT pg_sleep($window + 0.3);
SELECT dlock.fence('t:a', :a);
});
@lines = stale_lines($offset);
my @a = grep { /lease "t:a"/ } @lines;
is(scalar @a, 2, 'two lines, one in each window');
like($a[1] // '', qr/ was released \d+\.\d s ago; stale checks not logged meanwhile: 21 of this lease$/,
	'the second says how many checks were not logged meanwhile');

note 'at most 64 names in a window';
$offset = -s $node->logfile;
$out = app_session(qq{
CREATE TEMP TABLE flood AS SELECT i, (SELECT token FROM dlock.try_acquire('f:' || i, '1h', 'o')) FROM generate_series(1, 100) i;
SELECT count(*) FROM flood WHERE dlock.release('f:' || i, 'o');
SELECT token AS b FROM dlock.try_acquire('f:b', '1h', 'o') \\gset
SELECT dlock.release('f:b', 'o');
SELECT count(*) FROM flood WHERE dlock.fence('f:' || i, token);
SELECT pg_sleep($window + 0.3);
SELECT dlock.fence('f:b', :b);
});
@lines = stale_lines($offset);
is(scalar(grep { /lease "f:\d+"/ } @lines), 64, '100 names checked at once: 64 lines');
like((grep { /lease "f:b"/ } @lines)[0] // '', qr/; stale checks not logged meanwhile: 36 of other leases$/,
	'the next line counts the checks of the names that were not logged');

note 'an invalid setting is refused where it is read';
my ($rc, $stdout, $stderr) = $node->psql('app', qq{SET dlock.log_stale_fences = maybe; SELECT dlock.fence('s:x', $x)},
	extra_params => [ '-U', 'regress_app', '-v', 'VERBOSITY=verbose' ]);
like($stderr, qr/ERROR:  22023: parameter "dlock.log_stale_fences" requires a Boolean value/,
	'dlock.log_stale_fences = maybe: 22023 from the stale check');

$node->stop;
done_testing();
