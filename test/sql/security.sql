--
-- The privilege model: internal objects are private, no function resolves
-- names through the caller's search_path, and a role sees and acts on only
-- the leases of roles whose privileges it has.
--

-- Load the module, so that its settings exist before a role tries to set them
LOAD 'dlock';

CREATE ROLE regress_dlock_alice;
CREATE ROLE regress_dlock_bob;
CREATE ROLE regress_dlock_carol IN ROLE regress_dlock_alice;            -- inherits alice
CREATE ROLE regress_dlock_dave NOINHERIT IN ROLE regress_dlock_alice;   -- member, no privileges

--
-- Internal objects
--
SELECT priv,
       has_table_privilege('regress_dlock_bob', 'dlock.lease_state', priv) AS on_table,
       has_table_privilege('regress_dlock_bob', 'dlock.leases', priv) AS on_view
  FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS priv;
SELECT has_sequence_privilege('regress_dlock_bob', 'dlock.token_seq', 'USAGE') AS seq_usage,
       has_sequence_privilege('regress_dlock_bob', 'dlock.token_seq', 'UPDATE') AS seq_update,
       has_schema_privilege('regress_dlock_bob', 'dlock', 'USAGE') AS schema_usage,
       has_schema_privilege('regress_dlock_bob', 'dlock', 'CREATE') AS schema_create;

-- The lease functions are C and resolve no names, so from 1.1 on none of
-- them has a SET clause (1.0 pinned search_path for all but fence; see the
-- hijack test below); the input, output and comparison functions of
-- dlock.holder resolve no names either
SELECT p.proname, l.lanname, p.prosecdef, p.proconfig
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'dlock'::regnamespace
 ORDER BY p.proname;

SET ROLE regress_dlock_bob;
SELECT count(*) FROM dlock.lease_state;
UPDATE dlock.lease_state SET expires_at = 'infinity';
DELETE FROM dlock.lease_state;
SELECT nextval('dlock.token_seq');
SELECT setval('dlock.token_seq', 1);
CREATE TABLE dlock.intruder (x int);
SET dlock.max_ttl = '1 week';
RESET ROLE;

--
-- Leases of another role
--
SET ROLE regress_dlock_alice;
SELECT token AS a_token FROM dlock.try_acquire('sec:a', '1h', 'alice-owner') \gset
RESET ROLE;

SET ROLE regress_dlock_bob;
-- bob sees the lease, not the owner string
SELECT name, token = :a_token AS same_token, owner, holder_role, state FROM dlock.leases WHERE name = 'sec:a';
-- knowing alice's owner string gives bob nothing
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('sec:a', '1h', 'alice-owner')) AS try_refused;
SELECT dlock.acquire('sec:a', '1h', 'alice-owner', '0');
SELECT dlock.renew('sec:a', 'alice-owner', '1h') IS NULL AS renew_refused,
       dlock.release('sec:a', 'alice-owner') AS released;
SELECT dlock.force_release('sec:a');
-- bob's own leases are his
SELECT name, owner FROM dlock.try_acquire('sec:b', '1h', 'bob-owner');
SELECT name, owner, holder_role FROM dlock.leases WHERE name = 'sec:b';
RESET ROLE;

-- alice's lease is untouched
SELECT name, owner, token = :a_token AS same_token, holder_role, state FROM dlock.leases WHERE name = 'sec:a';

-- dave is a member of alice without her privileges: the same as bob
SET ROLE regress_dlock_dave;
SELECT owner FROM dlock.leases WHERE name = 'sec:a';
SELECT dlock.renew('sec:a', 'alice-owner', '1h') IS NULL AS renew_refused;
SELECT dlock.force_release('sec:a');
RESET ROLE;

-- carol has alice's privileges: she may act for alice
SET ROLE regress_dlock_carol;
SELECT owner FROM dlock.leases WHERE name = 'sec:a';
SELECT name, owner, token = :a_token AS same_token FROM dlock.renew('sec:a', 'alice-owner', '2h');
SELECT name, owner, token = :a_token AS same_token FROM dlock.try_acquire('sec:a', '2h', 'alice-owner');
SELECT dlock.release('sec:a', 'alice-owner') AS released;
SELECT name, owner FROM dlock.try_acquire('sec:c', '1h', 'carol-owner');
RESET ROLE;
SET ROLE regress_dlock_alice;
-- alice does not have carol's privileges: carol's lease is not hers
SELECT owner FROM dlock.leases WHERE name = 'sec:c';
SELECT dlock.force_release('sec:c');
RESET ROLE;
SET ROLE regress_dlock_carol;
SELECT dlock.force_release('sec:c') AS forced_own;
RESET ROLE;
-- superusers may act for every role
SELECT dlock.force_release('sec:b') AS forced_by_superuser;

--
-- Hijack attempts: objects that shadow pg_catalog first on the caller's
-- search_path.  The lease functions have no SET clause (from 1.1 on): they
-- are written in C and resolve no names, so none of these objects is ever
-- called and every function answers as it does without them.  Each shadow
-- raises "hijacked ..." when called.  The caller's own queries below use
-- none of the shadowed operators or functions: where they compare or
-- subtract tokens (bigints), they name pg_catalog's operators.
--
SET ROLE regress_dlock_alice;
SELECT name, owner FROM dlock.try_acquire('sec:ha', '1h', 'alice-ha', value => 'alice at 10.0.0.7');
RESET ROLE;
CREATE SCHEMA regress_hijack AUTHORIZATION regress_dlock_bob;
SET ROLE regress_dlock_bob;
DO $make$
DECLARE
  f record;
BEGIN
  FOR f IN
    SELECT * FROM (VALUES
      -- time, counters, sessions, privileges, settings
      ('clock_timestamp', '', 'timestamptz', NULL),
      ('now', '', 'timestamptz', NULL),
      ('statement_timestamp', '', 'timestamptz', NULL),
      ('transaction_timestamp', '', 'timestamptz', NULL),
      ('nextval', 'regclass', 'bigint', NULL),
      ('setval', 'regclass, bigint', 'bigint', NULL),
      ('currval', 'regclass', 'bigint', NULL),
      ('pg_backend_pid', '', 'integer', NULL),
      ('pg_has_role', 'oid, text', 'boolean', NULL),
      ('pg_has_role', 'name, text', 'boolean', NULL),
      ('pg_has_role', 'oid, oid, text', 'boolean', NULL),
      ('has_privs_of_role', 'oid, oid', 'boolean', NULL),
      ('is_member_of_role', 'oid, oid', 'boolean', NULL),
      ('superuser', '', 'boolean', NULL),
      ('has_database_privilege', 'oid, text', 'boolean', NULL),
      ('has_table_privilege', 'oid, text', 'boolean', NULL),
      ('pg_get_userbyid', 'oid', 'name', NULL),
      ('current_setting', 'text', 'text', NULL),
      ('set_config', 'text, text, boolean', 'text', NULL),
      ('gen_random_uuid', '', 'uuid', NULL),
      ('random', '', 'double precision', NULL),
      ('md5', 'text', 'text', NULL),
      ('hashtext', 'text', 'integer', NULL),
      ('pg_advisory_xact_lock', 'bigint', 'void', NULL),
      ('pg_try_advisory_xact_lock', 'bigint', 'boolean', NULL),
      ('pg_try_advisory_lock', 'bigint', 'boolean', NULL),
      ('pg_advisory_unlock', 'bigint', 'boolean', NULL),
      -- input, output and conversion functions
      ('textout', 'text', 'text', NULL),
      ('textin', 'text', 'text', NULL),
      ('int8out', 'bigint', 'text', NULL),
      ('int8', 'integer', 'bigint', NULL),
      ('interval_out', 'interval', 'text', NULL),
      ('timestamptz_out', 'timestamptz', 'text', NULL),
      ('length', 'text', 'integer', NULL),
      -- operators
      ('int8eq', 'bigint, bigint', 'boolean', '='),
      ('int8ne', 'bigint, bigint', 'boolean', '<>'),
      ('int8lt', 'bigint, bigint', 'boolean', '<'),
      ('int8le', 'bigint, bigint', 'boolean', '<='),
      ('int8gt', 'bigint, bigint', 'boolean', '>'),
      ('int8ge', 'bigint, bigint', 'boolean', '>='),
      ('int8pl', 'bigint, bigint', 'bigint', '+'),
      ('int8mi', 'bigint, bigint', 'bigint', '-'),
      ('oideq', 'oid, oid', 'boolean', '='),
      ('oidne', 'oid, oid', 'boolean', '<>'),
      ('nameeq', 'name, name', 'boolean', '='),
      ('int4eq', 'integer, integer', 'boolean', '='),
      ('texteq', 'text, text', 'boolean', '='),
      ('textne', 'text, text', 'boolean', '<>'),
      ('textcat', 'text, text', 'text', '||'),
      ('timestamptz_eq', 'timestamptz, timestamptz', 'boolean', '='),
      ('timestamptz_lt', 'timestamptz, timestamptz', 'boolean', '<'),
      ('timestamptz_le', 'timestamptz, timestamptz', 'boolean', '<='),
      ('timestamptz_gt', 'timestamptz, timestamptz', 'boolean', '>'),
      ('timestamptz_ge', 'timestamptz, timestamptz', 'boolean', '>='),
      ('timestamptz_mi', 'timestamptz, timestamptz', 'interval', '-'),
      ('timestamptz_pl_interval', 'timestamptz, interval', 'timestamptz', '+'),
      ('timestamptz_mi_interval', 'timestamptz, interval', 'timestamptz', '-'),
      ('interval_eq', 'interval, interval', 'boolean', '='),
      ('interval_lt', 'interval, interval', 'boolean', '<'),
      ('interval_le', 'interval, interval', 'boolean', '<='),
      ('interval_gt', 'interval, interval', 'boolean', '>'),
      ('interval_ge', 'interval, interval', 'boolean', '>='),
      ('interval_pl', 'interval, interval', 'interval', '+'),
      ('interval_mi', 'interval, interval', 'interval', '-')
    ) AS v(fname, args, rettype, op)
  LOOP
    EXECUTE format('CREATE FUNCTION regress_hijack.%I(%s) RETURNS %s LANGUAGE plpgsql AS %L',
                   f.fname, f.args, f.rettype,
                   format('BEGIN RAISE EXCEPTION %L; END', 'hijacked ' || f.fname));
    IF f.op IS NOT NULL THEN
      EXECUTE format('CREATE OPERATOR regress_hijack.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = regress_hijack.%I)',
                     f.op, split_part(f.args, ', ', 1), split_part(f.args, ', ', 2), f.fname);
    END IF;
  END LOOP;
END
$make$;
SELECT count(*) AS shadowing_functions FROM pg_proc WHERE pronamespace = 'regress_hijack'::regnamespace;
SELECT oprname, string_agg(format_type(oprleft, NULL), ', ' ORDER BY oprleft) AS on_types
  FROM pg_operator WHERE oprnamespace = 'regress_hijack'::regnamespace
 GROUP BY oprname ORDER BY oprname COLLATE "C";
SET search_path = regress_hijack, pg_catalog, pg_temp;
-- the shadows are in force for the caller's own queries
SELECT 1::bigint = 1::bigint;
SELECT now();
SELECT pg_has_role('regress_dlock_bob', 'USAGE');
SELECT textout('x');
-- and never for the lease functions
SELECT name, owner FROM dlock.try_acquire('sec:h', '1h', 'bob-h');
SELECT name, owner FROM dlock.acquire('sec:h', '1h', 'bob-h', '1s');
SELECT name, owner FROM dlock.renew('sec:h', 'bob-h', '1h');
SELECT token AS h_token FROM dlock.try_acquire('sec:h', '1h', 'bob-h') \gset
SELECT dlock.fence('sec:h', :h_token);
SELECT dlock.fence('sec:h', :h_token OPERATOR(pg_catalog.-) 1) AS fence_old_token;
-- a generated owner
SELECT name, owner IS NOT NULL AS has_owner FROM dlock.try_acquire('sec:hg', '1h');
-- a lock-delay: force-released, the name is not granted again for an hour
SELECT name, owner FROM dlock.try_acquire('sec:hd', '1h', 'bob-d', lock_delay => '1h');
SELECT dlock.force_release('sec:hd') AS forced;
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('sec:hd', '1h', 'bob-d')) AS in_lock_delay;
SELECT dlock.acquire('sec:hd', '1h', 'bob-d', '0');
-- a session-bound lease, whose holder is this backend
SELECT token AS hs_token FROM dlock.try_acquire('sec:hs', '1h', 'bob-s', session_bound => true) \gset
SELECT dlock.holder_alive(:hs_token) AS holder_alive;
SELECT dlock.holder_alive(:h_token) AS not_session_bound;
-- alice's lease: refused as before, and her owner string stays hidden
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('sec:ha', '1h', 'alice-ha')) AS try_refused;
SELECT dlock.acquire('sec:ha', '1h', 'alice-ha', '0');
SELECT dlock.renew('sec:ha', 'alice-ha', '1h') IS NULL AS renew_refused,
       dlock.release('sec:ha', 'alice-ha') AS released;
SELECT dlock.force_release('sec:ha');
-- sets: bob's own names at once under one token; alice's name in a set
-- makes the whole set refused, also with her owner string
SELECT count(*) AS granted, count(DISTINCT token) AS tokens, min(owner) AS owner
  FROM dlock.try_acquire_all(ARRAY['sec:s1', 'sec:s2'], '1h', 'bob-s1');
SELECT name, owner FROM dlock.acquire_all(ARRAY['sec:s3', 'sec:s2'], '1h', 'bob-s1', '1s')
  ORDER BY name COLLATE "C";
SELECT count(*) AS granted_with_alices FROM dlock.try_acquire_all(ARRAY['sec:s4', 'sec:ha'], '1h', 'bob-s4');
SELECT count(*) AS granted_as_alice FROM dlock.try_acquire_all(ARRAY['sec:s4', 'sec:ha'], '1h', 'alice-ha');
SELECT dlock.acquire_all(ARRAY['sec:s4', 'sec:ha'], '1h', 'alice-ha', '0');
SELECT dlock.release_all(ARRAY['sec:ha'], 'alice-ha') AS released_alices;
SELECT dlock.release_all(ARRAY['sec:s1', 'sec:s2', 'sec:s3', 'sec:s4', 'sec:ha'], 'bob-s1') AS released;
-- watch: tokens are public, as in dlock.leases
SELECT dlock.watch('sec:ha', NULL, '0') IS NOT NULL AS watch_sees_alices_token;
SELECT dlock.watch('sec:s1', NULL, '0') IS NULL AS watch_no_live_lease;
-- values: published to every role, alice's too (her owner stays hidden)
SELECT token OPERATOR(pg_catalog.=) :h_token AS same_token FROM dlock.renew('sec:h', 'bob-h', '1h', value => 'bob at 10.0.0.1');
SELECT name, owner, value FROM dlock.leases WHERE name LIKE 'sec:h' OR name LIKE 'sec:ha'
 ORDER BY name COLLATE "C";
-- the view and the function behind it
SELECT name, CASE WHEN name LIKE 'sec:hg' THEN '(generated)' ELSE owner END AS owner,
       holder_role, state, lock_delay, session_bound
  FROM dlock.leases WHERE name LIKE 'sec:%' ORDER BY name COLLATE "C";
SELECT name, CASE WHEN name LIKE 'sec:hg' THEN '(generated)' ELSE owner END AS owner,
       holder_role, state, ended_at IS NULL AS not_ended, grantable_at IS NULL AS no_grantable_at
  FROM dlock.lease_states() WHERE name LIKE 'sec:%' ORDER BY name COLLATE "C";
SELECT dlock.release('sec:h', 'bob-h') AS released;
SELECT dlock.release('sec:hs', 'bob-s') AS released;
SELECT dlock.release('sec:hg', 'not-the-owner') AS released;
SELECT dlock.force_release('sec:h') AS forced;
SELECT dlock.holder_alive(:hs_token) AS holder_alive_after_release;
-- purge: refused to bob, who is no superuser and not the database's owner
SELECT dlock.purge('0');
RESET ROLE;
-- and done by a superuser with the same search_path: it keeps the live
-- leases and the one in its lock-delay
SELECT dlock.purge('0') IS NOT NULL AS purged;
RESET search_path;
SELECT name, state FROM dlock.leases WHERE name LIKE 'sec:%' ORDER BY name COLLATE "C";

SET client_min_messages = warning;
DROP SCHEMA regress_hijack CASCADE;
RESET client_min_messages;
DELETE FROM dlock.lease_state WHERE name LIKE 'sec:%';
DROP ROLE regress_dlock_alice, regress_dlock_bob, regress_dlock_carol, regress_dlock_dave;

--
-- dlock reads and writes only its own relations.  A look-alike of the same
-- name in the extension's schema is refused rather than used.
--
ALTER TABLE dlock.lease_state RENAME TO lease_state_real;
ALTER INDEX dlock.lease_state_pkey RENAME TO lease_state_real_pkey;
CREATE TABLE dlock.lease_state (LIKE dlock.lease_state_real INCLUDING ALL);
SELECT dlock.try_acquire('sec:lookalike', '1h', 'w');
SELECT dlock.fence('sec:lookalike', 1);
SELECT count(*) AS lookalike_rows FROM dlock.lease_state;
DROP TABLE dlock.lease_state;
ALTER TABLE dlock.lease_state_real RENAME TO lease_state;
ALTER INDEX dlock.lease_state_real_pkey RENAME TO lease_state_pkey;
-- and a look-alike of the token counter
SELECT last_value AS real_last_value FROM dlock.token_seq \gset
ALTER SEQUENCE dlock.token_seq RENAME TO token_seq_real;
CREATE SEQUENCE dlock.token_seq;
SELECT dlock.try_acquire('sec:lookalike', '1h', 'w');
DROP SEQUENCE dlock.token_seq;
ALTER SEQUENCE dlock.token_seq_real RENAME TO token_seq;
SELECT token > :real_last_value AS token_from_real_counter
  FROM dlock.try_acquire('sec:lookalike', '1h', 'w');
SELECT dlock.release('sec:lookalike', 'w') AS released;
DELETE FROM dlock.lease_state WHERE name = 'sec:lookalike';

--
-- The schema: only its owner, the extension's owner, may create objects in
-- it (a schema that CREATE EXTENSION made is owned by the role that ran it)
--
SELECT n.nspowner = e.extowner AS owned_by_extension_owner,
       (SELECT count(*) FROM aclexplode(n.nspacl) a
         WHERE a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner) AS other_creators
  FROM pg_namespace n JOIN pg_extension e ON e.extnamespace = n.oid
 WHERE e.extname = 'dlock';

--
-- A schema dlock that a non-superuser (here the database's owner) created
-- before CREATE EXTENSION, with an overload of dlock.fence() that integer
-- literals would pick: the extension refuses to install into it.
--
\set SHOW_CONTEXT never
\set regress_db :DBNAME
CREATE ROLE regress_dlock_mallory;
CREATE DATABASE regress_dlock_precreated OWNER regress_dlock_mallory;
\c regress_dlock_precreated
SET ROLE regress_dlock_mallory;
CREATE SCHEMA dlock;
CREATE FUNCTION dlock.fence(name text, token integer) RETURNS boolean
  LANGUAGE sql AS 'SELECT true';
RESET ROLE;
CREATE EXTENSION dlock;
-- nothing was installed
SELECT count(*) AS extensions FROM pg_extension WHERE extname = 'dlock';
SELECT p.oid::regprocedure AS functions_in_schema
  FROM pg_proc p WHERE p.pronamespace = 'dlock'::regnamespace;
-- 1.0 (it has shipped) adopts the schema; the update to 1.1 refuses it
CREATE EXTENSION dlock VERSION '1.0';
ALTER EXTENSION dlock UPDATE;
-- owned by a superuser, but still holding mallory's function
ALTER SCHEMA dlock OWNER TO CURRENT_USER;
ALTER EXTENSION dlock UPDATE;
DROP FUNCTION dlock.fence(text, integer);
-- others may create objects in it
GRANT CREATE ON SCHEMA dlock TO regress_dlock_mallory;
ALTER EXTENSION dlock UPDATE;
REVOKE CREATE ON SCHEMA dlock FROM regress_dlock_mallory;
-- nothing left to refuse
ALTER EXTENSION dlock UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'dlock';
\c :regress_db
DROP DATABASE regress_dlock_precreated;
DROP ROLE regress_dlock_mallory;
\unset SHOW_CONTEXT
