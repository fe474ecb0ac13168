# Moving a database between the SQL edition and the C edition of dlock
# (sql-edition/move/), in place and through a dump.
#
# The SQL edition, installed by the database's owner, holds exclusive,
# shared and semaphore leases, a set, leases that ended (released, expired,
# force-released in their lock-delay), a lease of a role dropped since, and
# a counter ahead of the clock.  to-c-edition.sql refuses, changing nothing,
# while a session-bound lease's holder runs, while a prepared transaction
# holds the lease table, while a view depends on dlock.leases, and when it
# cannot lock within its timeout (naming the session).  With a fenced
# writer's transaction and an uncommitted grant open, it waits for both;
# the write commits, and the grant is kept.  After the move every row is
# what it was (name, slot, token, owner, holder role, expiry, lock-delay,
# value, kind), live tokens fence true and ended ones false, the counter is
# at least every token before and the next grant is larger, and renew,
# release, the semaphore's limit, shared leases and the lock-delay work as
# before.  to-sql-edition.sql moves back the same way, installing the SQL
# edition as the database's owner.  Last, the dump paths: a dump of the SQL
# edition restored onto another server and moved up there; and the C
# edition moved down in place, dumped, and restored onto a third server by
# the database's owner alone, as on a managed service.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest qw(locks_left max_of sql_edition_install);

my $edition = "$ENV{TESTDIR}/sql-edition";
my $to_c = "$edition/move/to-c-edition.sql";
my $to_sql = "$edition/move/to-sql-edition.sql";
my $tempdir = PostgreSQL::Test::Utils::tempdir;

my $node = PostgreSQL::Test::Cluster->new('move');
$node->init;
$node->append_conf('postgresql.conf', "max_prepared_transactions = 5\n");
$node->start;
sql_edition_install($node, 'app', 'regress_owner', 'regress_alice', 'regress_gone');

sub sql { my ($q, %o) = @_; return $node->safe_psql('app', $q, %o); }
sub as_alice { return sql($_[0], extra_params => [ '-U', 'regress_alice' ]); }

# move($node, $script, @psql_options): runs a move script as the superuser
sub move
{
	my ($n, $script, @opts) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', @opts,
			'-d', $n->connstr('app'), '-f', $script ], '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

sub edition
{
	my ($n) = @_;
	return $n->safe_psql('app', q{
		SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'dlock') THEN 'C'
		            WHEN to_regprocedure('dlock._token_next()') IS NOT NULL THEN 'SQL'
		            ELSE 'none' END});
}

# Every column of every row but the holder; the holder by its name (the
# text form is the same in both editions), but for the dropped role's
# lease, whose holder is compared by OID within a cluster
my $rows_sql = q{
	SELECT name, slot, token, owner, acquired_at, expires_at, ended_at, end_reason,
	       lock_delay, session_bound, holder_pid, value, shared, max_holders
	  FROM dlock.lease_state ORDER BY name, slot};
my $holders_sql = q{
	SELECT name, slot, holder_role::text FROM dlock.lease_state
	 WHERE name NOT IN ('x:gone', 'x:inflight') ORDER BY name, slot};
my $gone_sql = q{SELECT holder_role::oid FROM dlock.lease_state WHERE name = 'x:gone'};
sub rows { my ($n, $except) = @_; return join "\n", grep { !/^\Q$except\E\|/ } split /\n/, $n->safe_psql('app', $rows_sql); }

# A counter ahead of the clock (as after a clock stepped back): the first
# grant after a move that lost the counter would move it up to the clock
# only, below the tokens issued before
sql(q{SELECT setval('dlock.token_seq',
	((extract(epoch FROM clock_timestamp()) - 1767225600) * 4194304)::bigint + 1800::bigint * 4194304)},
	extra_params => [ '-U', 'regress_owner' ]);

my %tok;
sub grant
{
	my ($key, $q, %o) = @_;
	my $t = sql($q, %o);
	die "no grant for $key" unless $t =~ /^\d+$/;
	$tok{$key} = $t;
}
sub grant_alice { grant($_[0], $_[1], extra_params => [ '-U', 'regress_alice' ]); }

grant_alice('excl', q{SELECT token FROM dlock.try_acquire('x:excl', '1h', 'alice-1', lock_delay => '5min', value => 'host-a')});
grant_alice('r1', q{SELECT token FROM dlock.try_acquire('x:shared', '1h', 'r1', shared => true)});
grant_alice('r2', q{SELECT token FROM dlock.try_acquire('x:shared', '1h', 'r2', shared => true, value => 'reader')});
grant_alice('p1', q{SELECT token FROM dlock.try_acquire('x:sem', '1h', 'p1', max_holders => 3)});
grant_alice('p2', q{SELECT token FROM dlock.try_acquire('x:sem', '1h', 'p2', max_holders => 3)});
grant_alice('set', q{SELECT min(token) FROM dlock.try_acquire_all(ARRAY['set:a', 'set:b'], '1h', 'setter')});
grant_alice('old', q{SELECT token FROM dlock.try_acquire('x:old', '1h', 'o')});
as_alice(q{SELECT dlock.release('x:old', 'o')});
grant('forced', q{SELECT token FROM dlock.try_acquire('x:forced', '1h', 'f', lock_delay => '1h')});
sql(q{SELECT dlock.force_release('x:forced')});
grant_alice('short', q{SELECT token FROM dlock.try_acquire('x:short', '1s', 's')});
grant('gone', q{SELECT token FROM dlock.try_acquire('x:gone', '1h', 'g')},
	extra_params => [ '-U', 'regress_gone' ]);
sql('DROP ROLE regress_gone');
grant('admin', q{SELECT token FROM dlock.try_acquire('x:admin', '1h', 'admin')});
is(sql(q{SELECT count(*) FROM dlock.try_acquire_all(ARRAY['set:a', 'set:b'], '1h', 'setter')},
		extra_params => [ '-U', 'regress_alice' ]), 2, 'the set is held');
sql(q{CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
	INSERT INTO accounts VALUES (1, 100);
	GRANT ALL ON accounts TO regress_alice}, extra_params => [ '-U', 'regress_owner' ]);
my $gone = sql($gone_sql);

my @live = qw(excl r1 r2 p1 p2 set gone admin);
my @stale = qw(old forced short);
my %name_of = (excl => 'x:excl', r1 => 'x:shared', r2 => 'x:shared', p1 => 'x:sem',
	p2 => 'x:sem', set => 'set:b', gone => 'x:gone', admin => 'x:admin', old => 'x:old',
	forced => 'x:forced', short => 'x:short', prep => 'x:prep', inflight => 'x:inflight');

# fences(@keys): dlock.fence() of each key's name and token, as another role
sub fences
{
	my ($n, @keys) = @_;
	return $n->safe_psql('app', join(' UNION ALL ',
			map { "SELECT '$_:' || dlock.fence('$name_of{$_}', $tok{$_})" } @keys),
		extra_params => [ '-U', 'regress_alice' ]);
}
sub expect { my ($v, @keys) = @_; return join "\n", map { "$_:$v" } @keys; }

# The checks made after each move.  $before: the rows before it, but the
# one of name $except (the grant committed during the move, checked apart,
# or after a restore the lease of the dropped role); $gone: the dropped
# role's OID, for a move within a cluster
sub check_moved
{
	my ($n, $to, $before, $except, $holders, $gone, $top) = @_;
	is(rows($n, $except), $before, "$to: every row kept: name, slot, token, owner, expiry, lock-delay, value, kind");
	is($n->safe_psql('app', $holders_sql), $holders, "$to: holder roles read the same");
	is($n->safe_psql('app', $gone_sql), $gone, "$to: the dropped role's lease keeps its holder's OID")
	  if defined $gone;
	is($n->safe_psql('app', q{SELECT token || ' ' || owner || ' ' || (holder_role::text = current_user)
			FROM dlock.lease_state WHERE name = 'x:inflight'}),
		"$tok{inflight} inflight true", "$to: the grant committed during the move is kept, with its holder");
	is($n->safe_psql('app', q{SELECT string_agg(name || '/' || owner || '/' || state, ' ' ORDER BY name, owner)
			FROM dlock.leases WHERE state = 'live'}),
		'set:a/setter/live set:b/setter/live x:admin/admin/live x:excl/alice-1/live x:gone/g/live '
		  . 'x:inflight/inflight/live x:prep/prep/live x:sem/p1/live x:sem/p2/live '
		  . 'x:shared/r1/live x:shared/r2/live',
		"$to: the live leases, with their owners");
	is(fences($n, @live, 'prep', 'inflight'), expect('true', @live, 'prep', 'inflight'),
		"$to: every live token fences true");
	is(fences($n, @stale), expect('false', @stale), "$to: ended tokens fence false");
	cmp_ok($n->safe_psql('app', 'SELECT last_value FROM dlock.token_seq'), '>=', $top,
		"$to: the counter is at least every token issued before");
	my $next = $n->safe_psql('app', q{SELECT token FROM dlock.try_acquire('x:next', '1h', 'next')});
	cmp_ok($next, '>', $top, "$to: the next grant's token is larger than every token before");
	$n->safe_psql('app', q{SELECT dlock.release('x:next', 'next')});
	is($n->safe_psql('app', q{SELECT token FROM dlock.renew('x:excl', 'alice-1', '1h')},
			extra_params => [ '-U', 'regress_alice' ]),
		$tok{excl}, "$to: the holder renews her lease, same token");
	is($n->safe_psql('app', q{
			SELECT (SELECT count(*) FROM dlock.try_acquire('x:forced', '1h', 'w')) || ' '
			    || (SELECT count(*) FROM dlock.try_acquire('x:shared', '1h', 'w')) || ' '
			    || (SELECT count(*) FROM dlock.try_acquire('x:sem', '1h', 'p3', max_holders => 3)) || ' '
			    || (SELECT count(*) FROM dlock.try_acquire('x:sem', '1h', 'p4', max_holders => 3)) || ' '
			    || (SELECT count(*) FROM dlock.try_acquire('x:shared', '1h', 'r3', shared => true))}),
		'0 0 1 0 1',
		"$to: lock-delay kept; no exclusive lease beside shared ones; the semaphore's third permit, not a fourth; a third reader");
	is($n->safe_psql('app', q{SELECT dlock.release('x:sem', 'p3')::text || dlock.release('x:shared', 'r3')::text}),
		'truetrue', "$to: release works");
	is(locks_left($n, dbname => 'app'), '', "$to: nothing is left in dlock.locks");
}

# the expired lease has expired
$node->poll_query_until('app', q{SELECT state = 'expired' FROM dlock.leases WHERE name = 'x:short'})
  or die 'x:short did not expire';

#
# Refusals: each changes nothing
#
note 'SQL edition to C edition: refusals';
my $bound = $node->background_psql('app');
my $bound_token = $bound->query_safe(
	q{SELECT token FROM dlock.try_acquire('x:bound', '1h', 'b', session_bound => true)});
my ($rc, $out, $err) = move($node, $to_c);
like($err, qr/session-bound leases cannot move to the C edition.*"x:bound" \(token $bound_token\)/s,
	'a live session-bound lease is refused');
is(edition($node), 'SQL', '... and the SQL edition stays');
is($bound->query_safe(q{SELECT dlock.release('x:bound', 'b')}), 't', 'the session-bound lease is released');
$bound->quit;

my $prep = $node->background_psql('app');
$tok{prep} = $prep->query_safe(q{BEGIN; SELECT token FROM dlock.try_acquire('x:prep', '1h', 'prep')});
$prep->query_safe(q{PREPARE TRANSACTION 'move-prep'});
($rc, $out, $err) = move($node, $to_c);
like($err, qr/prepared transactions hold dlock's lease table.*'move-prep'/s,
	'a prepared transaction that granted is refused');
is(edition($node), 'SQL', '... and the SQL edition stays');
$prep->query_safe(q{COMMIT PREPARED 'move-prep'});
$prep->quit;

sql('CREATE VIEW public.my_leases AS SELECT name, state FROM dlock.leases');
($rc, $out, $err) = move($node, $to_c);
like($err, qr/objects outside schema dlock depend on the SQL edition.*view public\.my_leases would be dropped/s,
	'a view on dlock.leases is refused, not dropped');
is(edition($node), 'SQL', '... and the SQL edition stays');
sql('DROP VIEW public.my_leases');

my $writer = $node->background_psql('app', extra_params => [ '-U', 'regress_alice' ]);
my $writer_pid = $writer->query_safe('SELECT pg_backend_pid()');
is($writer->query_safe(qq{BEGIN; UPDATE accounts SET balance = balance - 10
		WHERE id = 1 AND dlock.fence('x:excl', $tok{excl}) RETURNING balance}),
	90, 'a fenced write under the SQL edition, its transaction open');
($rc, $out, $err) = move($node, $to_c, '-v', 'move_lock_timeout=1s');
like($err, qr/could not lock dlock's lease table within move_lock_timeout.*pid $writer_pid /s,
	'the lock times out and names the fenced session');
is(edition($node), 'SQL', '... and the SQL edition stays');

#
# The move up, while a fenced writer and an uncommitted grant are open
#
note 'SQL edition to C edition';
my $granter = $node->background_psql('app');
$tok{inflight} = $granter->query_safe(
	q{BEGIN; SELECT token FROM dlock.try_acquire('x:inflight', '1h', 'inflight')});
my $before = rows($node, 'x:inflight');
my $holders = $node->safe_psql('app', $holders_sql);
my $top = max_of(values %tok);
my ($mout, $merr) = ('', '');
my $mover = IPC::Run::start([ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('app'),
		'-f', $to_c ], '>', \$mout, '2>', \$merr);
$node->poll_query_until('app', q{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE datname = 'app' AND wait_event_type = 'Lock'})
  or die 'the move does not wait';
sleep 1;
is(edition($node), 'SQL', 'the move waits for the open transactions');
$granter->query_safe('COMMIT');
is($writer->query_safe('COMMIT; SELECT balance FROM accounts WHERE id = 1'), 90,
	'the fenced write commits');
$mover->finish;
is($? >> 8, 0, 'the move to the C edition succeeds') or diag $merr;
like($mout, qr/dlock: moved to the C edition 1\.3: 15 lease rows \(11 live\)/, 'it says what it moved');
is(edition($node), 'C', 'the C edition is installed, the SQL edition gone');
is($node->safe_psql('app', q{SELECT count(*) FROM pg_proc WHERE pronamespace = 'dlock'::regnamespace
		AND proname LIKE '\_%'}), 0, 'none of the SQL edition\'s functions is left');
is($writer->query_safe(qq{SELECT dlock.fence('x:excl', $tok{excl})}), 't',
	"the fenced writer's token fences true under the C edition");
check_moved($node, 'C edition', $before, 'x:inflight', $holders, $gone, $top);

#
# And back down
#
note 'C edition to SQL edition: refusals';
$bound = $node->background_psql('app');
$bound_token = $bound->query_safe(
	q{SELECT token FROM dlock.try_acquire('x:bound', '1h', 'b', session_bound => true)});
($rc, $out, $err) = move($node, $to_sql);
like($err, qr/session-bound leases cannot move to the SQL edition.*"x:bound" \(token $bound_token\)/s,
	'a live session-bound lease is refused');
is(edition($node), 'C', '... and the C edition stays');
is($bound->query_safe(q{SELECT dlock.release('x:bound', 'b')}), 't', 'the session-bound lease is released');
$bound->quit;

$prep = $node->background_psql('app');
$prep->query_safe(q{BEGIN; SELECT dlock.fence('x:admin', } . $tok{admin} . q{); PREPARE TRANSACTION 'move-fenced'});
($rc, $out, $err) = move($node, $to_sql);
like($err, qr/prepared transactions hold dlock's lease table.*'move-fenced'/s,
	'a prepared transaction that fenced is refused');
is(edition($node), 'C', '... and the C edition stays');
$prep->query_safe(q{ROLLBACK PREPARED 'move-fenced'});
$prep->quit;

sql('CREATE VIEW public.my_leases AS SELECT name, state FROM dlock.leases');
($rc, $out, $err) = move($node, $to_sql);
like($err, qr/cannot drop extension dlock because other objects depend on it/,
	'a view on dlock.leases is refused, not dropped');
is(edition($node), 'C', '... and the C edition stays');
sql('DROP VIEW public.my_leases');

note 'C edition to SQL edition';
is($writer->query_safe(qq{BEGIN; UPDATE accounts SET balance = balance - 10
		WHERE id = 1 AND dlock.fence('x:excl', $tok{excl}) RETURNING balance}),
	80, 'a fenced write under the C edition, its transaction open');
sql(q{DELETE FROM dlock.lease_state WHERE name = 'x:inflight'});
$tok{inflight} = $granter->query_safe(
	q{BEGIN; SELECT token FROM dlock.try_acquire('x:inflight', '1h', 'inflight')});
$before = rows($node, 'x:inflight');
$holders = $node->safe_psql('app', $holders_sql);
$top = max_of($top, $node->safe_psql('app', 'SELECT last_value FROM dlock.token_seq'));
($mout, $merr) = ('', '');
$mover = IPC::Run::start([ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('app'),
		'-f', $to_sql ], '>', \$mout, '2>', \$merr);
$node->poll_query_until('app', q{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE datname = 'app' AND wait_event_type = 'Lock'})
  or die 'the move does not wait';
sleep 1;
is(edition($node), 'C', 'the move waits for the open transactions');
$granter->query_safe('COMMIT');
is($writer->query_safe('COMMIT; SELECT balance FROM accounts WHERE id = 1'), 80,
	'the fenced write commits');
$mover->finish;
is($? >> 8, 0, 'the move to the SQL edition succeeds') or diag $merr;
like($mout, qr/dlock: moved to the SQL edition, owned by regress_owner: \d+ lease rows \(11 live\)/,
	'it says what it moved');
is(edition($node), 'SQL', 'the SQL edition is installed, the extension gone');
is($node->safe_psql('app', q{SELECT nspowner::regrole || ' ' || (SELECT proowner::regrole FROM pg_proc
		WHERE oid = 'dlock.acquire'::regproc) FROM pg_namespace WHERE nspname = 'dlock'}),
	'regress_owner regress_owner', "the SQL edition belongs to the database's owner");
is($writer->query_safe(qq{SELECT dlock.fence('x:excl', $tok{excl})}), 't',
	"the fenced writer's token fences true under the SQL edition, in a session that loaded the C edition's library");
$writer->quit;
$granter->quit;
check_moved($node, 'SQL edition', $before, 'x:inflight', $holders, $gone, $top);

#
# Through a dump: the SQL edition's dump restored onto a server of one's
# own, then moved up there
#
note 'a dump of the SQL edition, restored and moved up on another server';
my $dump = "$tempdir/sql-edition.dump";
$node->command_ok([ 'pg_dump', '-Fc', '-U', 'regress_owner', '-d', 'app', '-f', $dump ],
	"the database's owner dumps the SQL edition");
my $own = PostgreSQL::Test::Cluster->new('own');
$own->init;
$own->start;
$own->safe_psql('postgres', q{
	CREATE ROLE regress_owner LOGIN;
	CREATE ROLE regress_alice LOGIN;
	CREATE DATABASE app OWNER regress_owner;
});
$own->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'app', $dump ], 'restored');
$before = rows($node, 'x:gone');
$holders = $node->safe_psql('app', $holders_sql);
$top = max_of($top, $node->safe_psql('app', 'SELECT last_value FROM dlock.token_seq'));
($rc, $out, $err) = move($own, $to_c);
is($rc, 0, 'the restored SQL edition moves to the C edition') or diag $err;
is(edition($own), 'C', 'the C edition is installed');
check_moved($own, 'restored, C edition', $before, 'x:gone', $holders, undef, $top)
  if is(rows($own, 'x:gone'), $before, 'restored and moved: every row kept');

#
# The reverse: the C edition moved down in place, dumped, and restored by
# the database's owner alone (no superuser), as on a managed service
#
note 'the C edition moved down, dumped, and restored by the owner elsewhere';
$top = max_of($top, $own->safe_psql('app', 'SELECT last_value FROM dlock.token_seq'));
$before = rows($own, 'x:gone');
$holders = $own->safe_psql('app', $holders_sql);
($rc, $out, $err) = move($own, $to_sql);
is($rc, 0, 'the C edition moves down to the SQL edition') or diag $err;
$dump = "$tempdir/moved-down.dump";
$own->command_ok([ 'pg_dump', '-Fc', '-U', 'regress_owner', '-d', 'app', '-f', $dump ],
	"the database's owner dumps it");
my $managed = PostgreSQL::Test::Cluster->new('managed');
$managed->init;
$managed->start;
$managed->safe_psql('postgres', q{
	CREATE ROLE regress_owner LOGIN;
	CREATE ROLE regress_alice LOGIN;
	CREATE DATABASE app OWNER regress_owner;
});
$managed->command_ok([ 'pg_restore', '--exit-on-error', '--no-owner', '-U', 'regress_owner',
		'-d', 'app', $dump ], 'the owner restores it');
is(edition($managed), 'SQL', 'the SQL edition is there');
check_moved($managed, 'restored, SQL edition', $before, 'x:gone', $holders, undef, $top)
  if is(rows($managed, 'x:gone'), $before, 'moved down and restored: every row kept');

done_testing();
