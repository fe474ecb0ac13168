/* dlock--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '1.2'" to load this file. \quit

--
-- The epoch base of the token counter (src/token.c): a token's high bits
-- are its epoch, the WAL timeline it was issued on plus this base, so that
-- tokens keep growing across promotions, point-in-time recoveries and
-- restores.  One row, written by the first grant in a cluster whose system
-- identifier it does not hold.  Dumped with the leases, so that a restore
-- into another cluster continues above every dumped token.
--
CREATE TABLE dlock.token_epoch (
    system_identifier bigint NOT NULL,
    base bigint NOT NULL CHECK (base >= 0)
);
COMMENT ON TABLE dlock.token_epoch IS
  'The epoch base of dlock''s token counter for the cluster with this system identifier (pg_control_system()): a token''s epoch, its value shifted right by 40 bits, is the WAL timeline it was issued on plus the base. Written by dlock''s functions only.';
REVOKE ALL ON dlock.token_epoch FROM PUBLIC;
-- the database's owner dumps the database, this table included
DO $grant$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_authid
              WHERE rolname OPERATOR(pg_catalog.=) 'pg_database_owner'::pg_catalog.name) THEN
    GRANT SELECT ON TABLE dlock.token_epoch TO pg_database_owner;
  END IF;
END
$grant$;
SELECT pg_catalog.pg_extension_config_dump('dlock.token_epoch', '');

--
-- dlock.locks: the lock modes of the conflict rule, and the epoch lock
--
DO $locks$
BEGIN
  EXECUTE pg_catalog.format($view$
CREATE OR REPLACE VIEW dlock.locks AS
SELECT l.pid,
       k.kind,
       CASE WHEN k.by_token THEN t.name ELSE n.name END AS name,
       CASE WHEN k.by_token THEN k.key END AS token,
       l.mode,
       l.granted,
       %s AS waitstart
  FROM pg_catalog.pg_locks l
 CROSS JOIN LATERAL (
       SELECT CASE l.objsubid WHEN 17484 THEN 'name' WHEN 17485 THEN 'queue'
                              WHEN 17487 THEN 'watch' WHEN 17488 THEN 'pin'
                              WHEN 17489 THEN 'claim' WHEN 17490 THEN 'epoch'
                              ELSE 'session' END AS kind,
              l.objsubid OPERATOR(pg_catalog.=) ANY ('{17486,17488}'::pg_catalog.int2[]) AS by_token,
              (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
                OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8 AS key) k
  LEFT JOIN (SELECT DISTINCT s.name, dlock.name_key(s.name) AS key FROM dlock.lease_state s) n
         ON NOT k.by_token AND n.key OPERATOR(pg_catalog.=) k.key
  LEFT JOIN dlock.lease_state t
         ON k.by_token AND t.token OPERATOR(pg_catalog.=) k.key
 WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
   AND l.objsubid OPERATOR(pg_catalog.=) ANY ('{17484,17485,17486,17487,17488,17489,17490}'::pg_catalog.int2[])
   AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                         WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
$view$,
    CASE WHEN pg_catalog.current_setting('server_version_num')::pg_catalog.int4 OPERATOR(pg_catalog.>=) 140000
         THEN 'l.waitstart' ELSE 'NULL::pg_catalog.timestamptz' END);
END
$locks$;
COMMENT ON VIEW dlock.locks IS
  'dlock''s locks in pg_locks for this database. kind: name (a name''s state, in the modes of the conflict rule: AccessShareLock for a true fence, RowExclusiveLock for a grant made alongside others of its kind, ShareUpdateExclusiveLock for a renew or release, ShareRowExclusiveLock for any other grant or a force_release, AccessExclusiveLock for a grant into slot 0 or a purge), queue (ExclusiveLock: the head of the name''s queue of waiters), session (ExclusiveLock of a session-bound holder, key token), watch (AccessShareLock of a session in dlock.watch()), pin (the token of a shared lease or permit outside slot 0: AccessShareLock for a true fence, AccessExclusiveLock for a grant that waits for it or reuses its slot), claim (a slot, an owner or a name''s first kind claimed by a writer; name NULL) or epoch (ExclusiveLock while the token counter moves to a new timeline''s epoch). name: the lease name, once it has a committed row. waitstart: since when a lock that is not granted has been waited for.';

--
-- try_acquire returns a set: one row when granted, no row when refused.
-- Until 1.1 a refusal was one row of NULLs, which clients that test for a
-- row (if row:, rows.length, ResultSet.next()) took for a grant.  The
-- return type of a function cannot be changed in place, so it is dropped
-- and made again, with the same C entry point (which returns one composite,
-- NULL when refused, to a database still at 1.0 or 1.1).  EXECUTE is
-- granted to PUBLIC again, as when it was made.
--
DROP FUNCTION dlock.try_acquire(text, pg_catalog.interval, text, pg_catalog.interval, boolean,
                                text, boolean, boolean, integer);
CREATE FUNCTION dlock.try_acquire(name text, ttl interval, owner text DEFAULT NULL,
                                  lock_delay interval DEFAULT NULL,
                                  session_bound boolean DEFAULT false,
                                  value text DEFAULT NULL,
                                  queue boolean DEFAULT false,
                                  shared boolean DEFAULT false,
                                  max_holders integer DEFAULT 1)
RETURNS SETOF dlock.lease
AS 'MODULE_PATHNAME', 'dlock_try_acquire'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 1;
COMMENT ON FUNCTION dlock.try_acquire(text, interval, text, interval, boolean, text, boolean, boolean, integer) IS
  'Grants a lease of name for ttl at once and returns it as one row, or returns no row when another owner holds it, it is being changed, it is in its lock-delay, or others wait for it; never blocks. NULL owner: the server generates one. lock_delay NULL: dlock.default_lock_delay. value: published in dlock.leases (the same owner asking again keeps the old one when NULL). queue: a refused caller keeps its place in the name''s queue for ttl, and is granted in arrival order when it calls again (needs dlock in shared_preload_libraries). shared: a shared lease, live alongside other shared ones. max_holders: a permit of a counting semaphore, at most max_holders live at once.';

--
-- dlock.holder gets a binary form, so that a binary-format SELECT or a
-- binary COPY of dlock.lease_state works: the role's name as text, as in
-- the text form (an OID would name another role in another cluster).
--
CREATE FUNCTION dlock.holder_recv(pg_catalog.internal)
RETURNS dlock.holder
AS 'MODULE_PATHNAME', 'dlock_holder_recv'
LANGUAGE C STRICT STABLE PARALLEL SAFE;
CREATE FUNCTION dlock.holder_send(dlock.holder)
RETURNS pg_catalog.bytea
AS 'MODULE_PATHNAME', 'dlock_holder_send'
LANGUAGE C STRICT STABLE PARALLEL SAFE;
ALTER TYPE dlock.holder SET (RECEIVE = dlock.holder_recv, SEND = dlock.holder_send);
