# Tokens exact across the histories that epochs keyed on the timeline did
# not cover (I1 in docs/internals.md): each is played on real clusters, and
# each failed before tokens followed the clock.
#
# - Two promotions one after the other, with no WAL archive: the second
#   standby never sees the first's history file and picks the same
#   timeline number, yet issues none of the first's tokens again.
# - An older dump restored into the same cluster (DROP DATABASE, CREATE
#   DATABASE, pg_restore): the same system identifier and timeline, yet the
#   tokens issued after the dump fence false.
# - A base backup started as it is (no recovery.signal): timeline 1 and the
#   same system identifier as the original, yet the original's later tokens
#   are not issued again.
# - A restore into another cluster: the first grant moves the counter once;
#   rolled-back first grants and a crash spend nothing more, and while the
#   first grant's transaction is open, other names are granted at once.
#
# Each lost or superseded token is checked the way a holder would use it:
# dlock.fence() on the server that now grants its name, before and after
# 40 grants of the name in a row.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest qw(grant_many max_of regrant_checks lost_holder clock_ticks);

# grant NODE NAME OWNER [DB]: the token of a new lease of NAME
sub grant
{
	my ($node, $name, $owner, $db) = @_;
	return $node->safe_psql($db // 'postgres',
		qq{SELECT token FROM dlock.acquire('$name', '1h', '$owner', timeout => '5s')});
}

# timeline NODE: the timeline the node writes WAL on
sub timeline
{
	my ($node) = @_;
	$node->safe_psql('postgres', 'CHECKPOINT');
	return $node->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()');
}

# stale_fences NODE PREFIX TOKENS [DB]: how many of the names PREFIX1.. fence
# true with the given (lost or superseded) tokens
sub stale_fences
{
	my ($node, $prefix, $tokens, $db) = @_;
	my $list = join(',', @$tokens);
	return $node->safe_psql($db // 'postgres', qq{
		SELECT count(*) FILTER (WHERE dlock.fence('$prefix' || i, t))
		  FROM unnest('{$list}'::bigint[]) WITH ORDINALITY AS l(t, i)});
}

# promote NODE: promote and wait until it writes
sub promote
{
	my ($node) = @_;
	$node->promote;
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die $node->name . ' was not promoted';
}

note 'two promotions one after the other, no WAL archive';
my $p = PostgreSQL::Test::Cluster->new('sib_p');
$p->init(allows_streaming => 1);
$p->start;
$p->safe_psql('postgres', 'CREATE EXTENSION dlock');
$p->backup('sib_base');
my $a = PostgreSQL::Test::Cluster->new('sib_a');
$a->init_from_backup($p, 'sib_base', has_streaming => 1);
$a->start;
my $b = PostgreSQL::Test::Cluster->new('sib_b');
$b->init_from_backup($p, 'sib_base', has_streaming => 1);
$b->start;
grant_many($p, 'kept:', 3);
$p->wait_for_catchup($a);
$p->wait_for_catchup($b);
$p->stop('immediate');
promote($a);
my $tz = grant($a, 'X', 'Z');
my @lost_a = grant_many($a, 'sib:', 100);
my $tl_a = timeline($a);
$a->stop('immediate');    # lost before b ever streamed from it
promote($b);
is(timeline($b), $tl_a, "the second standby picked the first's timeline number too ($tl_a)");
is($b->safe_psql('postgres', "SELECT dlock.fence('X', $tz)"), 'f',
	"the first promoted server's holder of X fences false on the second");
is(join(' ', regrant_checks($b, 'X', $tz)), '40 0',
	'40 grants of X on the second: each token larger than the first one\'s holder\'s, which never fences true');
my @next_b = grant_many($b, 'sib:', 100);
is(scalar(grep { $_ <= max_of(@lost_a) } @next_b), 0,
	'every token of the second promoted server is above every token of the first (one clock)');
is(stale_fences($b, 'sib:', \@lost_a), '0', 'none of the first server\'s 100 tokens fences true on the second');
$b->stop;

note 'an older dump restored into the same cluster';
my $node = PostgreSQL::Test::Cluster->new('same');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', "max_prepared_transactions = 5\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock; CREATE DATABASE app');
$node->safe_psql('app', q{CREATE EXTENSION dlock;
	SELECT dlock.release('X', 'W') FROM dlock.acquire('X', '1h', 'W')});
my $dump = $node->basedir . '/app.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('app') ],
	'pg_dump of the application database');
my $tz2 = grant($node, 'X', 'Z', 'app');
my @after = grant_many($node, 'r:', 50, dbname => 'app');
$node->safe_psql('postgres', 'DROP DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('app'), $dump ],
	'pg_restore of the older dump into the same cluster');
is($node->safe_psql('app', "SELECT dlock.fence('X', $tz2)"), 'f',
	'the holder granted X after the dump fences false on the restored database');
is(join(' ', regrant_checks($node, 'X', $tz2, dbname => 'app')), '40 0',
	'40 grants of X after the restore: each larger than that holder\'s token, which never fences true');
my @next = grant_many($node, 'r:', 50, dbname => 'app');
is(scalar(grep { $_ <= max_of($tz2, @after) } @next), 0,
	'every token after the restore is above every token issued after the dump');
is(stale_fences($node, 'r:', \@after, 'app'), '0', 'none of the 50 later tokens fences true');

note 'a base backup started as it is, without recovery.signal';
grant_many($node, 'before-backup:', 3);
$node->backup('as_is');
my @lost_bb = grant_many($node, 'bb:', 100);
$node->stop;
my $copy = PostgreSQL::Test::Cluster->new('as_is');
$copy->init_from_backup($node, 'as_is');
$copy->start;
is($copy->safe_psql('postgres', 'SELECT NOT pg_is_in_recovery()'), 't', 'the copy runs as a primary');
is(timeline($copy), '1', 'on timeline 1, as the original');
my ($bb_name, $bb_token) = lost_holder($copy, 'bb:', @lost_bb);
is(join(' ', regrant_checks($copy, $bb_name, $bb_token)), '40 0',
	"40 grants of $bb_name on the copy: each larger than the original's later token, which never fences true");
my @next_bb = grant_many($copy, 'bb:', 100);
is(scalar(grep { $_ <= max_of(@lost_bb) } @next_bb), 0,
	"every token of the copy is above every token the original issued after the backup");
$copy->stop;

note 'a restore into another cluster: one move, nothing spent by rollbacks or a crash, no stall';
my $other = PostgreSQL::Test::Cluster->new('other');
$other->init;
$other->append_conf('postgresql.conf', "restart_after_crash = on\n");
$other->start;
$other->safe_psql('postgres', 'DROP DATABASE IF EXISTS app; CREATE DATABASE app');
$other->command_ok([ 'pg_restore', '-d', $other->connstr('app'), $dump ],
	'pg_restore into another cluster');
# The first grant's transaction stays open: other names are granted at once
my $first = $other->background_psql('app');
$first->query_safe('BEGIN');
my $first_token = $first->query_safe(q{SELECT token FROM dlock.acquire('first', '1h', 'f')});
is($other->safe_psql('app', q{SET statement_timeout = '5s';
		SELECT count(*) FROM dlock.try_acquire('second', '1h', 's');
		SELECT count(*) FROM dlock.acquire('third', '1h', 's', timeout => '1s')}),
	"1\n1", 'while the first grant\'s transaction is open, try_acquire and acquire of other names answer');
$first->query_safe('ROLLBACK');
$first->quit;
my @rolled;
for my $i (1 .. 20)
{
	push @rolled, $other->safe_psql('app', qq{BEGIN;
		SELECT token FROM dlock.acquire('rolled', '1h', 'r$i');
		ROLLBACK});
}
cmp_ok($rolled[-1] - $first_token, '<=', 25,
	"20 rolled-back grants after the first one's rollback took 20 tokens, no move (from $first_token to $rolled[-1])");
cmp_ok($rolled[-1], '<=', clock_ticks($other), 'the counter is not ahead of the clock');
cmp_ok($first_token, '>', max_of(@after, $tz2), 'the restored cluster issues tokens above every dumped one');
# A crash of the first grant's backend: the restart is a new incarnation,
# one move up to the clock, and the tokens stay with the clock
my $crashing = $other->background_psql('app');
$crashing->query_safe('BEGIN');
$crashing->query_safe(q{SELECT token FROM dlock.acquire('crash', '1h', 'c')});
my $crash_pid = $crashing->query_safe('SELECT pg_backend_pid()');
kill 'KILL', $crash_pid;
eval { $crashing->quit };
$other->poll_query_until('app', 'SELECT true', 't') or die 'no restart after the crash';
my $after_crash = grant($other, 'after-crash', 'a', 'app');
cmp_ok($after_crash, '>', $rolled[-1], 'after the crash, tokens go on above every earlier one');
cmp_ok($after_crash, '<=', clock_ticks($other), 'and not ahead of the clock: the crash spent nothing');
$other->stop;

done_testing();
