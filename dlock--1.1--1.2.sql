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
