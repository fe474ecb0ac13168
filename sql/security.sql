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

-- Every function is C; all but fence pin search_path (fence resolves no names
-- and runs once per row, see dlock--1.0.sql)
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
