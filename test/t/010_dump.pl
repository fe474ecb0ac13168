# Dumps and restores of a database with leases.
#
# The database's owner, not a superuser, dumps it (pg_dump reads the lease
# table and the token counter, which are the extension's configuration);
# other roles still cannot read the table.  The dump restores into a new
# database of the same cluster with every row, token and expiry; and into
# another cluster where a holder's role does not exist: the rows stay, with
# no holder role, so that only superusers may act on them, and the counter
# goes on from where it was.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tempdir = PostgreSQL::Test::Utils::tempdir;

my $src = PostgreSQL::Test::Cluster->new('source');
$src->init;
$src->start;
$src->safe_psql('postgres', q{
	CREATE ROLE regress_owner LOGIN;
	CREATE ROLE regress_alice LOGIN;
	CREATE DATABASE app OWNER regress_owner;
});
$src->safe_psql('app', q{
	CREATE EXTENSION dlock;
	-- some tokens issued before the leases that are kept
	SELECT dlock.try_acquire('churn:' || i, '1h', 'w') FROM generate_series(1, 20) i;
	SELECT dlock.release('churn:' || i, 'w') FROM generate_series(1, 20) i;
	SET ROLE regress_alice;
	SELECT dlock.try_acquire('alice:live', '1h', 'alice-owner', lock_delay => '10min');
	SELECT dlock.try_acquire('alice:ended', '1h', 'alice-owner');
	SELECT dlock.release('alice:ended', 'alice-owner');
	RESET ROLE;
	SELECT dlock.try_acquire('admin:live', '1h', 'admin-owner');
	SELECT dlock.try_acquire('admin:forced', '1h', 'admin-owner', lock_delay => '1h');
	SELECT dlock.force_release('admin:forced');
});
my $counter = $src->safe_psql('app', 'SELECT last_value FROM dlock.token_seq');
cmp_ok($counter, '>=', 24, "counter at $counter");

# Every column but the holder, and the holder apart
my $rows_sql = q{
	SELECT name, token, owner, acquired_at, expires_at, ended_at, end_reason,
	       lock_delay, session_bound
	  FROM dlock.lease_state ORDER BY name};
my $holders_sql = q{
	SELECT name, holder_role FROM dlock.lease_state
	 WHERE name NOT LIKE 'churn:%' ORDER BY name};
my $rows = $src->safe_psql('app', $rows_sql);

#
# What the database's owner and other roles may read
#
my ($ret, $out, $err) = $src->psql('app',
	'SELECT count(*) FROM dlock.lease_state', extra_params => [ '-U', 'regress_alice' ]);
like($err, qr/permission denied for table lease_state/,
	'another role cannot read the lease table');
($ret, $out, $err) = $src->psql('app',
	'SELECT last_value FROM dlock.token_seq', extra_params => [ '-U', 'regress_alice' ]);
like($err, qr/permission denied for sequence token_seq/,
	'another role cannot read the counter');
is($src->safe_psql('app', q{SELECT owner IS NULL FROM dlock.leases WHERE name = 'admin:live'},
		extra_params => [ '-U', 'regress_alice' ]),
	't', "another role does not see the owner strings of others' leases");
is($src->safe_psql('app', 'SELECT count(*) FROM dlock.lease_state',
		extra_params => [ '-U', 'regress_owner' ]),
	24, "the database's owner reads the lease table");
($ret, $out, $err) = $src->psql('app',
	q{UPDATE dlock.lease_state SET token = 1; SELECT nextval('dlock.token_seq')},
	extra_params => [ '-U', 'regress_owner', '-v', 'ON_ERROR_STOP=0' ]);
like($err, qr/permission denied for table lease_state.*permission denied for sequence token_seq/s,
	"the database's owner can neither change leases nor take tokens");

#
# The owner's dumps
#
my $dump = "$tempdir/app.dump";
$src->command_ok(
	[ 'pg_dump', '-Fc', '-U', 'regress_owner', '-d', 'app', '-f', $dump ],
	"the database's owner dumps the database (custom format)");
$src->command_ok(
	[ 'pg_dump', '-U', 'regress_owner', '-d', 'app', '-f', "$tempdir/app.sql" ],
	"the database's owner dumps the database (plain)");

#
# Restore into a new database of the same cluster
#
$src->safe_psql('postgres', 'CREATE DATABASE app2 OWNER regress_owner');
$src->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'app2', $dump ],
	'restore into a new database');
is($src->safe_psql('app2', $rows_sql), $rows, 'rows, tokens and expiries kept');
is($src->safe_psql('app2', $holders_sql), $src->safe_psql('app', $holders_sql),
	'holder roles kept');
is($src->safe_psql('app2', 'SELECT last_value FROM dlock.token_seq'), $counter,
	'counter kept');
cmp_ok($src->safe_psql('app2', q{SELECT token FROM dlock.try_acquire('new', '1h', 'w')}),
	'>', $counter, 'next grant has a larger token');
is($src->safe_psql('app2', q{SELECT token FROM dlock.renew('alice:live', 'alice-owner', '1h')},
		extra_params => [ '-U', 'regress_alice' ]),
	$src->safe_psql('app', q{SELECT token FROM dlock.lease_state WHERE name = 'alice:live'}),
	'the holder renews her restored lease with its token');

# The plain dump restores too
$src->safe_psql('postgres', 'CREATE DATABASE app3 OWNER regress_owner');
$src->command_ok([ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-q', '-d', 'app3',
		'-f', "$tempdir/app.sql" ], 'restore of the plain dump');
is($src->safe_psql('app3', $rows_sql), $rows, 'plain dump: rows kept');

#
# Restore into a cluster without the holder's role
#
my $dst = PostgreSQL::Test::Cluster->new('elsewhere');
$dst->init;
$dst->start;
$dst->safe_psql('postgres', q{
	CREATE ROLE regress_owner LOGIN;
	CREATE ROLE regress_bob LOGIN;
	CREATE DATABASE app OWNER regress_owner;
});
$dst->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'app', $dump ],
	'restore into a cluster without role regress_alice');
is($dst->safe_psql('app', $rows_sql), $rows, 'rows, tokens and expiries kept');
my $super = $dst->safe_psql('app', 'SELECT current_user');
is($dst->safe_psql('app', $holders_sql),
	"admin:forced|$super\nadmin:live|$super\nalice:ended|-\nalice:live|-",
	'leases of the missing role have no holder role');
is($dst->safe_psql('app', 'SELECT last_value FROM dlock.token_seq'), $counter,
	'counter kept');
cmp_ok($dst->safe_psql('app',
		q{SELECT token FROM dlock.try_acquire('alice:ended', '1h', 'w')}),
	'>', $counter, 'next grant of the ended lease has a larger token');

# A role of that name made later is a different role: the lease is not hers
$dst->safe_psql('postgres', 'CREATE ROLE regress_alice LOGIN');
for my $role ('regress_alice', 'regress_bob', 'regress_owner')
{
	is($dst->safe_psql('app', q{
			SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('alice:live', '1h', 'alice-owner')),
			       dlock.renew('alice:live', 'alice-owner', '1h') IS NULL,
			       dlock.release('alice:live', 'alice-owner'),
			       (SELECT owner IS NULL FROM dlock.leases WHERE name = 'alice:live')},
			extra_params => [ '-U', $role ]),
		't|t|f|t', "$role cannot act on the lease that has no holder role");
	($ret, $out, $err) = $dst->psql('app', q{SELECT dlock.force_release('alice:live')},
		extra_params => [ '-U', $role ]);
	like($err, qr/permission denied to force-release lease "alice:live"/,
		"$role cannot force-release it");
}
is($dst->safe_psql('app', q{SELECT dlock.force_release('alice:live')}), 't',
	'a superuser force-releases it');
is($dst->safe_psql('app', q{SELECT state FROM dlock.leases WHERE name = 'alice:live'}),
	'force_released', 'the lease ended');

$dst->stop;
$src->stop;
done_testing();
