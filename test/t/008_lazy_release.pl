# Lazy releases: a transaction whose only change is a release commits
# without waiting for its WAL flush.  Losing such a release in a crash leaves
# the lease exactly as it was, held until its ttl; a later durable commit
# carries it; a transaction that changes anything else, a force_release, and
# dlock.lazy_release = off keep the caller's synchronous_commit.
#
# To see whether a commit waited for its flush, the WAL writer is stopped
# (SIGSTOP) and autovacuum is off, so that nothing else flushes; a crash is
# then made by killing the WAL writer, which makes the postmaster reset
# shared memory, where unflushed WAL is.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('lazy');
$node->init;
$node->append_conf('postgresql.conf', qq{
restart_after_crash = on
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION dlock;
	CREATE TABLE audit (note text);
});
# The update script's ALTER FUNCTION statements leave dead row versions in
# pg_proc.  The first backend that reads such a page may prune it and write
# WAL, which would make a release-only transaction look as if it changed
# something else.  Remove them before anything is measured.
$node->safe_psql('postgres', 'VACUUM pg_catalog.pg_proc');

my $walwriter;

sub stop_walwriter
{
	$walwriter = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'});
	die 'no WAL writer' unless $walwriter;
	kill 'STOP', $walwriter;
}

# crash: kill the stopped WAL writer; the postmaster resets shared memory
# and runs crash recovery
sub crash
{
	kill 'KILL', $walwriter;
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'walwriter'})
	  or die 'server did not come back';
	$walwriter = undef;
}

# committed_lazily(SQL): run SQL in one transaction that ends with COMMIT;
# true when its commit did not flush the WAL it wrote.  The insert position
# just before COMMIT lies after all of the transaction's changes and before
# its commit record: a commit that waited for its flush moved the flush
# position past it.
my $before_commit;

sub committed_lazily
{
	my ($sql) = @_;
	my $out = $node->safe_psql('postgres', qq{
		BEGIN;
		$sql;
		SELECT pg_current_wal_insert_lsn() AS before_commit \\gset
		COMMIT;
		SELECT :'before_commit', pg_current_wal_flush_lsn() < :'before_commit';
	});
	my @lines = split /\n/, $out;
	my $lazily;
	($before_commit, $lazily) = split /\|/, $lines[-1];
	return $lazily eq 't';
}

sub lease_row
{
	my ($name) = @_;
	return $node->safe_psql('postgres', qq{SELECT owner || ' ' || token || ' '
		|| coalesce(ended_at::text, 'live') FROM dlock.lease_state WHERE name = '$name'});
}

sub grant
{
	my ($name, $owner) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT token FROM dlock.try_acquire('$name', '1h', '$owner')});
}

note 'a release alone commits lazily, and a crash may take it back whole';
my $token = grant('a', 'w');
my $granted = lease_row('a');
stop_walwriter();
ok(committed_lazily(q{SELECT dlock.release('a', 'w')}),
	'a release-only transaction does not wait for its flush');
is($node->safe_psql('postgres', q{SELECT state FROM dlock.leases WHERE name = 'a'}), 'released',
	'the release is visible at once');
crash();
is(lease_row('a'), $granted, 'the release lost in the crash left the lease exactly as granted');
is($node->safe_psql('postgres', q{SELECT state FROM dlock.leases WHERE name = 'a'}), 'live',
	'the lease is held again until its ttl');
is($node->safe_psql('postgres', q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('a', '1h', 'x'))}), 't',
	'nobody else is granted the name meanwhile');
is($node->safe_psql('postgres', qq{SELECT dlock.fence('a', $token)}), 't',
	'the holder\'s token is the live one again');
is($node->safe_psql('postgres', q{SELECT dlock.release('a', 'w')}), 't',
	'the holder can release it again');
cmp_ok(grant('a', 'x'), '>', $token, 'the next grant gets a larger token');

note 'a later durable commit carries a lazy release';
grant('b', 'w');
stop_walwriter();
ok(committed_lazily(q{SELECT dlock.release('b', 'w')}), 'b released lazily');
grant('c', 'w');
crash();
like(lease_row('b'), qr/^w \d+ \d{4}-/, 'the release of b survived, carried by the grant of c');
like(lease_row('c'), qr/^w \d+ live$/, 'the grant of c survived');

note 'other changes in the transaction keep the flush';
grant('d', 'w');
grant('e', 'w');
stop_walwriter();
ok(!committed_lazily(q{INSERT INTO audit VALUES ('control')}),
	'the control: an ordinary commit waits for its flush');
ok(!committed_lazily(q{INSERT INTO audit VALUES ('before'); SELECT dlock.release('d', 'w')}),
	'a write before the release: the commit waits for its flush');
ok(!committed_lazily(q{SELECT dlock.release('e', 'w'); INSERT INTO audit VALUES ('after')}),
	'a write after the release: the commit waits for its flush');
crash();
like(lease_row('d'), qr/^w \d+ \d{4}-/, 'release of d survived the crash');
like(lease_row('e'), qr/^w \d+ \d{4}-/, 'release of e survived the crash');
is($node->safe_psql('postgres', q{SELECT string_agg(note, ',' ORDER BY note) FROM audit
	WHERE note IN ('before', 'after')}), 'after,before', 'and so did the writes next to them');

note 'force_release, dlock.lazy_release = off and renew keep the flush';
grant('f', 'w');
grant('g', 'w');
grant('h', 'w');
stop_walwriter();
ok(!committed_lazily(q{SELECT dlock.force_release('f')}), 'force_release waits for its flush');
ok(!committed_lazily(q{SET LOCAL dlock.lazy_release = off; SELECT dlock.release('g', 'w')}),
	'with dlock.lazy_release = off a release waits for its flush');
ok(!committed_lazily(q{SELECT dlock.renew('h', 'w', '2h')}), 'renew waits for its flush');
ok(!committed_lazily(q{SELECT dlock.release('h', 'w'); SELECT dlock.try_acquire('h', '1h', 'x')}),
	'a release and a grant together wait for the flush');
crash();
like(lease_row('f'), qr/^w \d+ \d{4}-/, 'the force_release survived the crash');
like(lease_row('g'), qr/^w \d+ \d{4}-/, 'the non-lazy release survived the crash');
like(lease_row('h'), qr/^x \d+ live$/, 'the regrant survived the crash');

note 'a refused release and a lazy release in one transaction';
grant('i', 'w');
stop_walwriter();
ok(committed_lazily(q{SELECT dlock.release('i', 'not-the-owner'); SELECT dlock.release('i', 'w')}),
	'a refused release changes nothing, and the transaction still commits lazily');
kill 'CONT', $walwriter;
ok($node->poll_query_until('postgres', qq{SELECT pg_current_wal_flush_lsn() > '$before_commit'}),
	'the WAL writer flushes a lazy release soon after');

$node->stop;
done_testing();
