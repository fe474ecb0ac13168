--
-- The privilege model: internal objects are private, every function has a
-- fixed search_path or resolves no names, and a role sees and acts on only
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

-- The lease functions are C and all but fence pin search_path (fence
-- resolves no names and runs once per row, see dlock--1.0.sql); the input,
-- output and comparison functions of dlock.holder resolve no names either
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
SELECT dlock.try_acquire('sec:a', '1h', 'alice-owner') IS NULL AS try_refused;
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
-- Hijack attempts: objects that shadow pg_catalog on bob's search_path
--
CREATE SCHEMA regress_hijack AUTHORIZATION regress_dlock_bob;
SET ROLE regress_dlock_bob;
CREATE FUNCTION regress_hijack.clock_timestamp() RETURNS timestamptz
  LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked clock_timestamp'; END $$;
CREATE FUNCTION regress_hijack.now() RETURNS timestamptz
  LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked now'; END $$;
CREATE FUNCTION regress_hijack.nextval(regclass) RETURNS bigint
  LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked nextval'; END $$;
CREATE FUNCTION regress_hijack.pg_has_role(oid, text) RETURNS boolean
  LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked pg_has_role'; END $$;
CREATE FUNCTION regress_hijack.texteq(text, text) RETURNS boolean
  LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked texteq'; END $$;
CREATE OPERATOR regress_hijack.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_hijack.texteq);
CREATE FUNCTION regress_hijack.tstzle(timestamptz, timestamptz) RETURNS boolean
  LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked <='; END $$;
CREATE OPERATOR regress_hijack.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                                   FUNCTION = regress_hijack.tstzle);
SET search_path = regress_hijack, pg_catalog, pg_temp;
SELECT name, owner FROM dlock.try_acquire('sec:h', '1h', 'bob-h');
SELECT name, owner FROM dlock.acquire('sec:h', '1h', 'bob-h', '1s');
SELECT name, owner FROM dlock.renew('sec:h', 'bob-h', '1h');
SELECT token AS h_token FROM dlock.try_acquire('sec:h', '1h', 'bob-h') \gset
SELECT dlock.fence('sec:h', :h_token);
-- (the caller's own query must not use "=" here: that would be bob's own)
SELECT name, owner, state FROM dlock.leases WHERE name LIKE 'sec:%' ORDER BY name COLLATE "C";
SELECT dlock.release('sec:h', 'bob-h') AS released;
SELECT dlock.force_release('sec:h') AS forced;
RESET search_path;
RESET ROLE;

DROP SCHEMA regress_hijack CASCADE;
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
