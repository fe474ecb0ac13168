# Tokens outlive their timeline: after every way a cluster can lose grants
# (a failover to a standby that fell behind, a point-in-time recovery to a
# moment before some grants, a restore of a dump into another cluster, a
# chain of two promotions), every token issued afterwards is larger than
# every token issued before, lost ones included, and a lost holder's token
# fences false, also after its name was granted again many times.
#
# "Lost" grants are made on a primary after its standby stopped receiving
# WAL, then the primary crashes and the standby is promoted: its own copy of
# the token counter is behind the tokens the old primary handed out.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest qw(grant_many max_of regrant_checks lost_holder);

# lost_holder_checks NODE NAME TOKEN LABEL: the lost holder's token fences
# false on NODE before its name is granted again, and after each of 40
# grants of it, each larger than the lost token
sub lost_holder_checks
{
	my ($node, $name, $lost, $label) = @_;
	is($node->safe_psql('postgres', "SELECT dlock.fence('$name', $lost)"), 'f',
		"$label: the lost token fences false before its name is granted again");
	is(join(' ', regrant_checks($node, $name, $lost)), '40 0',
		"$label: 40 grants of the name in a row, each larger than the lost token, which never fences true");
}

# A primary with an asynchronous streaming standby
sub async_pair
{
	my ($pname, $sname, $conf) = @_;
	my $primary = PostgreSQL::Test::Cluster->new($pname);
	$primary->init(allows_streaming => 1, has_archiving => 1);
	$primary->append_conf('postgresql.conf', $conf) if defined $conf;
	$primary->start;
	$primary->safe_psql('postgres', 'CREATE EXTENSION dlock');
	$primary->backup("${pname}_base");
	my $standby = PostgreSQL::Test::Cluster->new($sname);
	$standby->init_from_backup($primary, "${pname}_base", has_streaming => 1);
	$standby->start;
	return ($primary, $standby);
}

# cut_and_lose PRIMARY STANDBY PREFIX N: stop the standby's stream, grant N
# names on the primary (acknowledged, never replicated), crash the primary
# and promote the standby; the lost tokens
sub cut_and_lose
{
	my ($primary, $standby, $prefix, $n) = @_;
	$standby->stop;
	my @lost = grant_many($primary, $prefix, $n);
	$primary->stop('immediate');
	$standby->start;
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'promotion failed';
	return @lost;
}

note 'a failover to an asynchronous standby that fell behind';
my ($p1, $s1) = async_pair('p1', 's1');
my @kept = grant_many($p1, 'kept:', 5);
$p1->wait_for_catchup($s1);
# More grants than the counter logs ahead of itself (32), so that the
# standby's copy of the counter is behind the lost tokens
my @lost = cut_and_lose($p1, $s1, 'job:', 100);
is($s1->safe_psql('postgres', q{SELECT count(*) FROM dlock.lease_state WHERE name LIKE 'job:%'}),
	'0', 'the grants made after the stream was cut are lost');
lost_holder_checks($s1, lost_holder($s1, 'job:', @lost), 'asynchronous failover');
my @next = grant_many($s1, 'job:', 100);
my $max_lost = max_of(@lost);
is(scalar(grep { $_ <= $max_lost } @next), 0,
	"every name's next token is above every lost one (lost up to $max_lost, next from $next[0])");
is($s1->safe_psql('postgres', "SELECT dlock.fence('kept:1', $kept[0])"), 't',
	'a replicated lease still fences true on the new primary');

note 'a chain of two promotions, each losing grants';
# s1 (promoted, timeline 2) gets a standby of its own, which falls behind
$s1->backup('s1_base');
my $s1b = PostgreSQL::Test::Cluster->new('s1b');
$s1b->init_from_backup($s1, 's1_base', has_streaming => 1);
$s1b->start;
$s1->wait_for_catchup($s1b);
my @lost2 = cut_and_lose($s1, $s1b, 'chain:', 100);
lost_holder_checks($s1b, lost_holder($s1b, 'chain:', @lost2), 'second promotion');
my @next2 = grant_many($s1b, 'chain:', 100);
my $max_before = max_of(@lost, @next, @lost2);
is(scalar(grep { $_ <= $max_before } @next2), 0,
	'after the second promotion every token is above every token of both earlier timelines');
is($s1b->safe_psql('postgres', "SELECT dlock.fence('job:100', $lost[-1])"), 'f',
	'the token lost in the first promotion still fences false');
cmp_ok($next2[0], '<', 2**53, 'tokens stay below 2^53');
$s1b->stop;

note 'a failover to a synchronous standby with dlock.durable_grants = off, while it lagged';
my ($p3, $s3) = async_pair('p3', 's3');
$p3->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_standby_names = 's3'; SELECT pg_reload_conf()});
$p3->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'})
  or die 'the standby did not become synchronous';
$p3->append_conf('postgresql.conf', "dlock.durable_grants = off\nsynchronous_commit = local\n");
$p3->reload;
my @kept3 = grant_many($p3, 'sync-kept:', 3);
$p3->wait_for_catchup($s3);
my @lost3 = cut_and_lose($p3, $s3, 'sync:', 100);
lost_holder_checks($s3, lost_holder($s3, 'sync:', @lost3), 'synchronous standby, durable_grants off');
my @next3 = grant_many($s3, 'sync:', 100);
is(scalar(grep { $_ <= max_of(@lost3) } @next3), 0,
	'every token after the failover is above the acknowledged grants the standby lacked');
$s3->stop;

note 'a point-in-time recovery to a moment before some grants';
my $p4 = PostgreSQL::Test::Cluster->new('p4');
$p4->init(has_archiving => 1, allows_streaming => 1);
$p4->start;
$p4->safe_psql('postgres', 'CREATE EXTENSION dlock');
my @before = grant_many($p4, 'pitr-before:', 3);
$p4->backup('p4_base');
my @kept4 = grant_many($p4, 'pitr-kept:', 3);
$p4->safe_psql('postgres', q{SELECT pg_create_restore_point('before_loss')});
my @lost4 = grant_many($p4, 'pitr:', 100);
$p4->safe_psql('postgres', 'SELECT pg_switch_wal()');
$p4->poll_query_until('postgres',
	q{SELECT last_archived_wal IS NOT NULL AND last_failed_wal IS NULL FROM pg_stat_archiver})
  or die 'WAL not archived';
$p4->stop;
my $r4 = PostgreSQL::Test::Cluster->new('r4');
$r4->init_from_backup($p4, 'p4_base', has_restoring => 1);
$r4->append_conf('postgresql.conf', qq{recovery_target_name = 'before_loss'
recovery_target_action = 'promote'
});
$r4->start;
$r4->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die 'recovery did not end';
is($r4->safe_psql('postgres', q{SELECT count(*) FROM dlock.lease_state WHERE name LIKE 'pitr:%'}),
	'0', 'the recovery stopped before the later grants');
is($r4->safe_psql('postgres', q{SELECT count(*) FROM dlock.lease_state WHERE name LIKE 'pitr-kept:%'}),
	'3', 'and after the earlier ones');
lost_holder_checks($r4, lost_holder($r4, 'pitr:', @lost4), 'point-in-time recovery');
my @next4 = grant_many($r4, 'pitr:', 100);
is(scalar(grep { $_ <= max_of(@lost4) } @next4), 0,
	'every token after the recovery is above the tokens of the grants it left out');
$r4->stop;

note 'pg_dump and pg_restore into a fresh cluster, then a failover there that loses grants';
my $p5 = PostgreSQL::Test::Cluster->new('p5');
$p5->init;
$p5->start;
$p5->safe_psql('postgres', 'CREATE EXTENSION dlock');
# the dump carries the leases, the token counter and its epoch row
my @dumped = grant_many($p5, 'dumped:', 4);
my $dump = $PostgreSQL::Test::Utils::tmp_check . '/p5.dump';
$p5->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $p5->connstr('postgres') ],
	'pg_dump of a database with leases');
my ($q5, $q5s) = async_pair('q5', 'q5s');
$q5->safe_psql('postgres', 'DROP EXTENSION dlock; DROP SCHEMA dlock');
$q5->command_ok([ 'pg_restore', '-d', $q5->connstr('postgres'), $dump ],
	'pg_restore into a fresh cluster');
my @restored_next = grant_many($q5, 'restored:', 3);
is(scalar(grep { $_ <= max_of(@dumped) } @restored_next), 0,
	'the restored cluster issues tokens above every dumped one');
is($q5->safe_psql('postgres', "SELECT dlock.fence('dumped:4', $dumped[-1])"), 't',
	'a dumped live lease still fences true after the restore');
$q5->wait_for_catchup($q5s);
my @lost5 = cut_and_lose($q5, $q5s, 'restored-lost:', 100);
lost_holder_checks($q5s, lost_holder($q5s, 'restored-lost:', @lost5), 'restored cluster');
my @next5 = grant_many($q5s, 'restored-lost:', 100);
is(scalar(grep { $_ <= max_of(@lost5, @restored_next, @dumped) } @next5), 0,
	'after a failover in the restored cluster, tokens are above every token before, lost or dumped');
$q5s->stop;
$p5->stop;

done_testing();
