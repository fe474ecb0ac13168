# Upgrades: the walk from the first version through every update script.
#
# A database starts at the first version and holds leases of every kind
# (live, released, in its lock-delay, session-bound from a session that
# stays connected, fenced by a transaction that stays open while the update
# starts); it walks ALTER EXTENSION dlock UPDATE one version at a time, and
# every lease must keep its owner, holder, token, expiry and lock-delay,
# fence() must stay true for live tokens, and the next token must be larger.
# Then every database that walked from an older version must have exactly
# the catalog of a fresh CREATE EXTENSION dlock: members, functions and
# their properties, views, columns, indexes, operators, casts, ACLs and
# initial privileges, comments, and the configuration tables.
#
# A new version adds itself to @versions (after its update script exists).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my @versions = ('1.0', '1.1', '1.2', '1.3');
my $latest = $versions[-1];

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
	CREATE ROLE regress_holder;
	CREATE DATABASE fresh;
});

is($node->safe_psql('postgres',
		q{SELECT default_version FROM pg_available_extensions WHERE name = 'dlock'}),
	$latest, "default version is the last one of the walk, $latest");

# One database per starting version; the first holds the leases
my %start_db;
for my $i (0 .. $#versions - 1)
{
	my $db = "from_$versions[$i]" =~ s/\./_/gr;
	$start_db{ $versions[$i] } = $db;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION dlock VERSION '$versions[$i]'");
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
		$versions[$i], "CREATE EXTENSION dlock VERSION '$versions[$i]' with this module");
}
my $db = $start_db{ $versions[0] };

# At 1.0 the arguments added later are not declared: an unknown function
# (42883), as docs/reference.md says, until the update
my ($arg_rc, $arg_out, $arg_err) = $node->psql($db,
	q{\set VERBOSITY verbose
	  SELECT dlock.try_acquire('at-1.0', '1h', 'o', value => 'v')});
like($arg_err, qr/ERROR:  42883: function dlock\.try_acquire\(.*value => .*\) does not exist/,
	'at 1.0, value => is not declared: 42883');

#
# Leases of every kind, at the first version
#
$node->safe_psql($db, q{
	CREATE TABLE account (id int PRIMARY KEY, debits int NOT NULL);
	INSERT INTO account VALUES (77, 0);
	GRANT ALL ON account TO regress_holder;
	SET ROLE regress_holder;
	SELECT dlock.try_acquire('live:role', '1h', 'w-role');
	RESET ROLE;
	SELECT dlock.try_acquire('live', '1h', 'w-live');
	SELECT dlock.try_acquire('fenced', '1h', 'w-fenced');
	SELECT dlock.try_acquire('released', '1h', 'w-released');
	SELECT dlock.release('released', 'w-released');
	SELECT dlock.try_acquire('delayed', '1h', 'w-delayed', lock_delay => '2h');
	SELECT dlock.force_release('delayed');
	SELECT dlock.try_acquire('live:delay', '1h', 'w-ld', lock_delay => '30min');
});

my $session = $node->background_psql($db);
my $session_token = $session->query_safe(
	q{SELECT token FROM dlock.try_acquire('session', '1h', 'w-session', session_bound => true)});
like($session_token, qr/^\d+$/, 'session-bound lease granted');

my $fenced_token = $node->safe_psql($db,
	q{SELECT token FROM dlock.lease_state WHERE name = 'fenced'});
my $fencer = $node->background_psql($db);
$fencer->query_safe('BEGIN');
is($fencer->query_safe("SELECT dlock.fence('fenced', $fenced_token)"), 't',
	'fence true in a transaction that stays open across the update');

# Every column of every row; holder_role as role name whatever its type
my $rows_sql = q{
	SELECT name, token, owner, holder_role::oid::regrole, acquired_at, expires_at,
	       ended_at, end_reason, lock_delay, session_bound, holder_pid IS NOT NULL
	  FROM dlock.lease_state ORDER BY name, token};
my $view_sql = q{
	SELECT name, token, owner, holder_role, state, grantable_at, lock_delay, session_bound
	  FROM dlock.leases ORDER BY name, token};
my $rows_before = $node->safe_psql($db, $rows_sql);
my $view_before = $node->safe_psql($db, $view_sql);
my $last_token = $node->safe_psql($db, 'SELECT last_value FROM dlock.token_seq');

#
# The walk
#
for my $i (1 .. $#versions)
{
	my $v = $versions[$i];

	# Started while the fenced transaction is open; an update that takes a
	# lock of the lease table conflicting with the fence's waits for it (the
	# update to 1.3 takes none: it may end at once).  Its end is seen in
	# pg_stat_activity, not in its output, which may come in one read with
	# the line before it.
	my $updater = $node->background_psql($db);
	my $updater_pid = $updater->query_safe('SELECT pg_backend_pid()');
	$updater->query_until(qr/updating/, qq{\\echo updating
		ALTER EXTENSION dlock UPDATE TO '$v';
	});
	$node->poll_query_until($db, qq{SELECT state = 'idle' OR wait_event_type = 'Lock'
		FROM pg_stat_activity WHERE pid = $updater_pid})
	  or die "update to $v neither waits nor ends";

	# The fenced write passes, and its transaction commits
	is($fencer->query_safe(
			"UPDATE account SET debits = debits + 1 WHERE id = 77 AND dlock.fence('fenced', $fenced_token) RETURNING debits"),
		$i, "to $v: fenced write of the open transaction passes");
	$fencer->query_safe('COMMIT');
	$node->poll_query_until($db, qq{SELECT state = 'idle' FROM pg_stat_activity WHERE pid = $updater_pid})
	  or die "update to $v did not end";
	$updater->quit;

	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
		$v, "ALTER EXTENSION dlock UPDATE TO '$v'");
	is($node->safe_psql($db, $rows_sql), $rows_before, "to $v: every lease row kept");
	is($node->safe_psql($db, $view_sql), $view_before, "to $v: dlock.leases unchanged");
	is($node->safe_psql($db, qq{SELECT dlock.fence('fenced', $fenced_token),
			dlock.fence('live', (SELECT token FROM dlock.leases WHERE name = 'live'))}),
		't|t', "to $v: fence true for live tokens");
	is($session->query_safe("SELECT dlock.fence('session', $session_token)"), 't',
		"to $v: fence true in the session that holds a session-bound lease");
	is($node->safe_psql($db, q{SELECT
			(SELECT token FROM dlock.try_acquire('live', '1h', 'intruder')) IS NULL,
			(SELECT token FROM dlock.try_acquire('delayed', '1h', 'intruder')) IS NULL,
			(SELECT token FROM dlock.try_acquire('session', '1h', 'intruder')) IS NULL,
			(SELECT token FROM dlock.try_acquire('live:delay', '1h', 'intruder')) IS NULL}),
		't|t|t|t', "to $v: live, delayed and session-bound leases still hold");
	is($node->safe_psql($db, q{SET ROLE regress_holder;
			SELECT token FROM dlock.renew('live:role', 'w-role', '1h')}),
		$node->safe_psql($db, q{SELECT token FROM dlock.lease_state WHERE name = 'live:role'}),
		"to $v: the holder role still renews its lease, same token");
	my $next = $node->safe_psql($db,
		"SELECT token FROM dlock.try_acquire('new:$v', '1h', 'w-new')");
	cmp_ok($next, '>', $last_token, "to $v: next token larger than every earlier one");
	$last_token = $node->safe_psql($db, 'SELECT last_value FROM dlock.token_seq');

	if ($v eq '1.1')
	{
		is($node->safe_psql($db, q{SELECT count(*), count(token)
				FROM dlock.try_acquire('live', '1h', 'intruder')}),
			'1|0', "to $v: a refused try_acquire returns one row of NULLs, as it did before 1.2");
		is($node->safe_psql($db, q{SELECT count(*) FROM dlock.leases WHERE value IS NOT NULL}),
			'0', "to $v: the leases from before have no value");
		my ($count, $tokens, $set_token) = split / /, $node->safe_psql($db,
			q{SELECT count(*) || ' ' || count(DISTINCT token) || ' ' || min(token)
			    FROM dlock.try_acquire_all(ARRAY['set:1', 'set:2'], '1h', 'w-set')});
		is("$count $tokens", '2 1', "to $v: a set is granted under one token");
		cmp_ok($set_token, '>', $last_token, "to $v: larger than every earlier token");
		is($node->safe_psql($db, q{SELECT dlock.watch('live', NULL, '0') = token
				FROM dlock.leases WHERE name = 'live'}),
			't', "to $v: watch sees a lease granted before the update");
		is($node->safe_psql($db, q{SELECT dlock.renew('live', 'w-live', '1h', 'v1') IS NOT NULL;
				SELECT value FROM dlock.leases WHERE name = 'live'}),
			"t\nv1", "to $v: a lease granted before the update publishes a value");

		# The rows of 1.0 are exclusive leases in slot 0; the new kinds work
		is($node->safe_psql($db, q{SELECT count(*) FROM dlock.lease_state
				WHERE slot <> 0 OR shared OR max_holders <> 1}),
			'0', "to $v: every lease from before is exclusive, in slot 0");
		is($node->safe_psql($db, q{SELECT (SELECT token FROM dlock.try_acquire('live', '1h', 'reader', shared => true)) IS NULL}),
			't', "to $v: a shared lease waits for an exclusive lease granted before the update");
		my ($readers, $reader_tokens, $reader_min) = split / /, $node->safe_psql($db,
			q{SELECT count(*) || ' ' || count(DISTINCT token) || ' ' || min(token)
			    FROM (SELECT (SELECT token FROM dlock.try_acquire('shared:1', '1h', 'r' || i, shared => true))
			            FROM generate_series(1, 3) i) r});
		is("$readers $reader_tokens", '3 3', "to $v: three shared leases, each with its own token");
		cmp_ok($reader_min, '>', $set_token, "to $v: shared tokens larger than every earlier token");
		is($node->safe_psql($db, q{SELECT count(token) FROM
				(SELECT (SELECT token FROM dlock.try_acquire('permits:1', '1h', 'p' || i, max_holders => 2))
				   FROM generate_series(1, 3) i) p}),
			'2', "to $v: a semaphore of 2 grants two permits of three requests");
		$last_token = $node->safe_psql($db, 'SELECT last_value FROM dlock.token_seq');
	}

	if ($v eq '1.2')
	{
		is($node->safe_psql($db, q{SELECT count(*)
				FROM dlock.try_acquire('live', '1h', 'intruder')}),
			'0', "to $v: a refused try_acquire returns no row");
		is($node->safe_psql($db, q{SELECT count(*)
				FROM dlock.try_acquire('upgrade:setof', '1h', 'w-setof')}),
			'1', "to $v: a granted try_acquire returns one row");
		my $bin = $node->basedir . '/holder.bin';
		is($node->safe_psql($db, qq{
				COPY (SELECT holder_role FROM dlock.lease_state WHERE name = 'live:role')
				  TO '$bin' (FORMAT binary);
				CREATE TEMP TABLE holder_copy (holder dlock.holder);
				COPY holder_copy FROM '$bin' (FORMAT binary);
				SELECT holder::text FROM holder_copy}),
			'regress_holder', "to $v: dlock.holder has a binary form: a binary COPY out and in keeps the role");
		# With a catalog from before 1.3 (no dlock.token_incarnation), this
		# module takes tokens from the counter alone, as 1.1 did: they go on
		# from the counter, far below the clock's ticks
		my $small = $node->safe_psql($db,
			q{SELECT token FROM dlock.try_acquire('epoch:1', '1h', 'w-epoch')});
		cmp_ok($small, '<', 2**40, "to $v: with this catalog, tokens go on from the counter ($small)");
		# dlock.locks decodes what other sessions hold: the session-bound
		# holder's lock, by its token, and the lock of the name that a true
		# fence keeps to the end of its transaction
		my $session_pid = $session->query_safe('SELECT pg_backend_pid()');
		my $fencer_pid = $fencer->query_safe('SELECT pg_backend_pid()');
		$fencer->query_safe('BEGIN');
		$fencer->query_safe("SELECT dlock.fence('fenced', $fenced_token)");
		is($node->safe_psql($db, qq{
				SELECT CASE pid WHEN $session_pid THEN 'holder' ELSE 'fencer' END,
				       kind, name, token, mode, granted
				  FROM dlock.locks WHERE pid IN ($session_pid, $fencer_pid)
				 ORDER BY 1, 2}),
			"fencer|name|fenced||AccessShareLock|t\n"
			  . "holder|session|session|$session_token|ExclusiveLock|t",
			"to $v: dlock.locks shows the fence's lock of the name and the session-bound holder's lock");
		$fencer->query_safe('COMMIT');
		$last_token = $node->safe_psql($db, 'SELECT last_value FROM dlock.token_seq');
	}

	if ($v eq '1.3')
	{
		# The first grant after the update moved the counter up to the
		# clock (I1): the token of new:1.3 above is at least the clock's
		# ticks of the update's start, and at most those of now; 1.2's
		# epoch table is gone, and the marker names this incarnation
		my $clock_sql = q{((extract(epoch FROM clock_timestamp())
			- extract(epoch FROM timestamptz '2026-01-01 00:00:00+00')) * 4194304)::bigint};
		my $clock_now = $node->safe_psql($db, "SELECT $clock_sql");
		cmp_ok($next, '>', $clock_now - 4194304 * 600,
			"to $v: the first grant after the update moved the counter up to the clock ($next)");
		cmp_ok($next, '<=', $clock_now, "to $v: and not beyond it");
		is($node->safe_psql($db, q{SELECT to_regclass('dlock.token_epoch') IS NULL,
				(SELECT is_called FROM dlock.token_incarnation)}),
			't|t', "to $v: 1.2's epoch table is gone; dlock.token_incarnation marks the move");
		# A rolled-back grant spends nothing: the counter moves by one token
		my $before = $node->safe_psql($db, 'SELECT last_value FROM dlock.token_seq');
		$node->safe_psql($db, q{BEGIN; SELECT dlock.try_acquire('rolled:1.3', '1h', 'w'); ROLLBACK;});
		is($node->safe_psql($db, 'SELECT last_value FROM dlock.token_seq') - $before, 1,
			"to $v: a rolled-back grant takes one token, no move");
		$last_token = $node->safe_psql($db, 'SELECT last_value FROM dlock.token_seq');
	}

	# The next step starts from what is now there, with a new open fence
	$rows_before = $node->safe_psql($db, $rows_sql);
	$view_before = $node->safe_psql($db, $view_sql);
	$fencer->query_safe('BEGIN');
	$fencer->query_safe("SELECT dlock.fence('fenced', $fenced_token)");
}
$fencer->query_safe('COMMIT');
$fencer->quit;

# The session-bound lease is still bound to its session
$session->quit;
ok($node->poll_query_until($db,
		q{SELECT state = 'session_ended' FROM dlock.leases WHERE name = 'session'}),
	'session-bound lease ends with its session after the walk');

# The other starting versions walk too (without leases)
for my $i (1 .. $#versions - 1)
{
	$node->safe_psql($start_db{ $versions[$i] }, 'ALTER EXTENSION dlock UPDATE');
}

$node->safe_psql('fresh', 'CREATE EXTENSION dlock');
is($node->safe_psql('fresh', q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
	$latest, "fresh CREATE EXTENSION dlock installs $latest");

#
# Catalog of the extension, section by section
#
my $members = q{
	WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'dlock')
	SELECT d.classid, d.objid, d.objsubid FROM pg_depend d, ext
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'};
my $nsp = q{(SELECT extnamespace FROM pg_extension WHERE extname = 'dlock')};
my %catalog = (
	'members' => qq{
		SELECT pg_describe_object(classid, objid, objsubid) FROM ($members) m ORDER BY 1},
	'extension' => q{
		SELECT extversion, extowner::regrole, extnamespace::regnamespace, extrelocatable,
		       (SELECT array_agg(c::regclass::text ORDER BY c::regclass::text) FROM unnest(extconfig) c),
		       (SELECT array_agg(x ORDER BY x) FROM unnest(extcondition) x)
		  FROM pg_extension WHERE extname = 'dlock'},
	'config dump' => q{
		SELECT c::regclass, x FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(c, x)
		 WHERE e.extname = 'dlock' ORDER BY 1::text},
	'schema' => qq{
		SELECT nspname, nspowner::regrole, nspacl FROM pg_namespace WHERE oid = $nsp},
	'functions' => qq{
		SELECT p.oid::regprocedure, p.proargnames, pg_get_function_arguments(p.oid),
		       pg_get_function_result(p.oid), l.lanname, p.prokind, p.provolatile,
		       p.proisstrict, p.prosecdef, p.proleakproof, p.proparallel, p.procost,
		       p.prorows, p.proretset, p.proconfig, p.prosrc, p.probin, p.proacl
		  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
		 WHERE p.pronamespace = $nsp ORDER BY p.oid::regprocedure::text},
	'relations' => qq{
		SELECT c.relname, c.relkind, c.relpersistence, c.reloptions, c.relacl,
		       c.relowner::regrole, c.relhasindex, c.relhastriggers, c.relhasrules,
		       c.relreplident, c.relrowsecurity, am.amname
		  FROM pg_class c LEFT JOIN pg_am am ON am.oid = c.relam
		 WHERE c.relnamespace = $nsp ORDER BY 1},
	'columns' => qq{
		SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
		       a.attnotnull, a.attcollation::regcollation, a.attidentity, a.attgenerated,
		       pg_get_expr(d.adbin, d.adrelid), a.attacl
		  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
		  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE c.relnamespace = $nsp AND a.attnum > 0 AND NOT a.attisdropped
		 ORDER BY 1, 2},
	'views' => qq{
		SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class c
		 WHERE c.relnamespace = $nsp AND c.relkind IN ('v', 'm') ORDER BY 1},
	'indexes and constraints' => qq{
		SELECT 'index', pg_get_indexdef(i.indexrelid) FROM pg_index i
		  JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = $nsp
		UNION ALL
		SELECT conname, pg_get_constraintdef(o.oid) FROM pg_constraint o
		 WHERE o.connamespace = $nsp
		UNION ALL
		SELECT 'trigger', pg_get_triggerdef(t.oid) FROM pg_trigger t
		  JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = $nsp
		ORDER BY 1, 2},
	'sequences' => qq{
		SELECT s.seqrelid::regclass, s.seqtypid::regtype, s.seqstart, s.seqincrement,
		       s.seqmax, s.seqmin, s.seqcache, s.seqcycle
		  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
		 WHERE c.relnamespace = $nsp ORDER BY 1::text},
	'types' => qq{
		SELECT t.typname, t.typtype, t.typlen, t.typbyval, t.typalign, t.typstorage,
		       t.typcategory, t.typispreferred, t.typinput, t.typoutput, t.typreceive,
		       t.typsend, t.typelem::regtype, t.typarray::regtype, t.typacl,
		       t.typowner::regrole, t.typcollation::regcollation
		  FROM pg_type t WHERE t.typnamespace = $nsp ORDER BY 1},
	'operators' => qq{
		SELECT o.oid::regoperator, o.oprcode, o.oprcom::regoperator, o.oprnegate::regoperator,
		       o.oprrest, o.oprjoin, o.oprcanhash, o.oprcanmerge, o.oprresult::regtype
		  FROM pg_operator o WHERE o.oprnamespace = $nsp ORDER BY 1::text},
	'operator classes' => qq{
		SELECT am.amname, c.opcname, c.opcintype::regtype, c.opcdefault, f.opfname,
		       (SELECT string_agg(ao.amopstrategy || ' ' || ao.amopopr::regoperator, ', '
		                          ORDER BY ao.amopstrategy)
		          FROM pg_amop ao WHERE ao.amopfamily = f.oid),
		       (SELECT string_agg(ap.amprocnum || ' ' || ap.amproc::regprocedure, ', '
		                          ORDER BY ap.amprocnum)
		          FROM pg_amproc ap WHERE ap.amprocfamily = f.oid)
		  FROM pg_opclass c JOIN pg_am am ON am.oid = c.opcmethod
		  JOIN pg_opfamily f ON f.oid = c.opcfamily
		 WHERE c.opcnamespace = $nsp ORDER BY 1, 2},
	'casts' => qq{
		SELECT c.castsource::regtype, c.casttarget::regtype, c.castfunc, c.castcontext,
		       c.castmethod
		  FROM pg_cast c
		 WHERE c.castsource IN (SELECT oid FROM pg_type WHERE typnamespace = $nsp)
		    OR c.casttarget IN (SELECT oid FROM pg_type WHERE typnamespace = $nsp)
		 ORDER BY 1::text, 2::text},
	'comments' => qq{
		SELECT pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
		  FROM pg_description d
		 WHERE (d.classoid, d.objoid) IN (SELECT classid, objid FROM ($members) m)
		 ORDER BY 1},
	'initial privileges' => qq{
		SELECT pg_describe_object(i.classoid, i.objoid, i.objsubid), i.privtype, i.initprivs
		  FROM pg_init_privs i
		 WHERE (i.classoid, i.objoid) IN (SELECT classid, objid FROM ($members) m)
		    OR (i.classoid = 'pg_namespace'::regclass AND i.objoid = $nsp)
		 ORDER BY 1},
);

for my $section (sort keys %catalog)
{
	my $expected = $node->safe_psql('fresh', $catalog{$section});
	isnt($expected, '', "fresh install has $section");
	for my $v (@versions[0 .. $#versions - 1])
	{
		is($node->safe_psql($start_db{$v}, $catalog{$section}), $expected,
			"walk from $v: $section as in a fresh install");
	}
}

done_testing();
