/* dlock--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '1.1'" to load this file. \quit

-- A fresh CREATE EXTENSION dlock runs dlock--1.0.sql and then this script,
-- so everything below also holds for new installations.

--
-- The schema must be dlock's own.  CREATE EXTENSION installs into an
-- existing schema named dlock instead of failing, and whoever could create
-- objects there could put an overload such as dlock.fence(text, integer)
-- in front of dlock's functions (a call with an integer literal would pick
-- it, and a stalled holder's write would pass its fence).  So this script
-- refuses a schema that is owned by a role other than the extension's owner
-- (or a superuser), that lets other roles create objects in it, or that
-- holds objects that are not the extension's.  A schema that CREATE
-- EXTENSION made is owned by the role that ran it, which is the extension's
-- owner; it is not a member of the extension (DROP EXTENSION keeps it).
--
-- Everything here is schema-qualified and compares values of equal types,
-- so no operator or function of the schema being checked can take part.
--
DO $check$
DECLARE
  ext_oid        pg_catalog.oid;
  ext_owner      pg_catalog.oid;
  nsp_oid        pg_catalog.oid;
  nsp_owner      pg_catalog.oid;
  nsp_acl        pg_catalog.aclitem[];
  owner_is_super boolean;
  creators       text;
  strangers      text;
  cls_class      pg_catalog.oid := 'pg_catalog.pg_class'::pg_catalog.regclass;
  cls_extension  pg_catalog.oid := 'pg_catalog.pg_extension'::pg_catalog.regclass;
BEGIN
  SELECT e.oid, e.extowner, e.extnamespace INTO STRICT ext_oid, ext_owner, nsp_oid
    FROM pg_catalog.pg_extension e
   WHERE e.extname OPERATOR(pg_catalog.=) 'dlock'::pg_catalog.name;
  SELECT n.nspowner, n.nspacl, a.rolsuper INTO STRICT nsp_owner, nsp_acl, owner_is_super
    FROM pg_catalog.pg_namespace n
    JOIN pg_catalog.pg_authid a ON a.oid OPERATOR(pg_catalog.=) n.nspowner
   WHERE n.oid OPERATOR(pg_catalog.=) nsp_oid;

  IF nsp_owner OPERATOR(pg_catalog.<>) ext_owner AND NOT owner_is_super THEN
    RAISE EXCEPTION USING
      ERRCODE = 'insufficient_privilege',
      MESSAGE = pg_catalog.format('schema dlock is owned by role %I, not by the owner of extension dlock',
                                  pg_catalog.pg_get_userbyid(nsp_owner)),
      DETAIL = 'The extension would use a schema that it did not create: its owner could create functions there that take the place of dlock''s own.',
      HINT = 'Drop or rename schema dlock, then CREATE EXTENSION dlock; or, after checking what the schema holds, ALTER SCHEMA dlock OWNER TO a superuser.';
  END IF;

  SELECT pg_catalog.string_agg(CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                                    THEN 'PUBLIC'
                                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
                               ', ')
    INTO creators
    FROM pg_catalog.aclexplode(COALESCE(nsp_acl, pg_catalog.acldefault('n'::pg_catalog."char", nsp_owner))) a
   WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::text
     AND a.grantee OPERATOR(pg_catalog.<>) nsp_owner;
  IF creators IS NOT NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = 'insufficient_privilege',
      MESSAGE = 'roles other than its owner may create objects in schema dlock',
      DETAIL = pg_catalog.format('CREATE on schema dlock is granted to %s.', creators),
      HINT = pg_catalog.format('REVOKE CREATE ON SCHEMA dlock FROM %s.', creators);
  END IF;

  -- Objects in the schema, and those that belong to the extension: its
  -- members and what depends on them internally or automatically (row
  -- types, array types, the primary key and its index)
  WITH RECURSIVE in_schema(classid, objid) AS (
         SELECT cls_class, c.oid FROM pg_catalog.pg_class c
          WHERE c.relnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid, p.oid
           FROM pg_catalog.pg_proc p WHERE p.pronamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_type'::pg_catalog.regclass::pg_catalog.oid, t.oid
           FROM pg_catalog.pg_type t WHERE t.typnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_constraint o WHERE o.connamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_operator o WHERE o.oprnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_opclass'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_opclass o WHERE o.opcnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_opfamily o WHERE o.opfnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_collation o WHERE o.collnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_conversion o WHERE o.connamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_ts_config o WHERE o.cfgnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_ts_dict o WHERE o.dictnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_ts_parser'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_ts_parser o WHERE o.prsnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_ts_template'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_ts_template o WHERE o.tmplnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_statistic_ext o WHERE o.stxnamespace OPERATOR(pg_catalog.=) nsp_oid
         UNION ALL
         SELECT cls_extension, o.oid
           FROM pg_catalog.pg_extension o
          WHERE o.extnamespace OPERATOR(pg_catalog.=) nsp_oid
            AND o.oid OPERATOR(pg_catalog.<>) ext_oid
       ),
       belongs(classid, objid) AS (
         SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
          WHERE d.refclassid OPERATOR(pg_catalog.=) cls_extension
            AND d.refobjid OPERATOR(pg_catalog.=) ext_oid
            AND d.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog."char"
         UNION
         SELECT d.classid, d.objid FROM pg_catalog.pg_depend d, belongs b
          WHERE d.refclassid OPERATOR(pg_catalog.=) b.classid
            AND d.refobjid OPERATOR(pg_catalog.=) b.objid
            AND d.deptype OPERATOR(pg_catalog.=) ANY (ARRAY['i', 'a']::pg_catalog."char"[])
       )
  SELECT pg_catalog.string_agg(pg_catalog.pg_describe_object(s.classid, s.objid, 0), ', '
                               ORDER BY pg_catalog.pg_describe_object(s.classid, s.objid, 0))
    INTO strangers
    FROM in_schema s
   WHERE NOT EXISTS (SELECT FROM belongs b
                      WHERE b.classid OPERATOR(pg_catalog.=) s.classid
                        AND b.objid OPERATOR(pg_catalog.=) s.objid);
  IF strangers IS NOT NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = 'object_not_in_prerequisite_state',
      MESSAGE = 'schema dlock holds objects that are not part of extension dlock',
      DETAIL = pg_catalog.format('Objects: %s.', strangers),
      HINT = 'Drop or move these objects, or drop or rename schema dlock and then CREATE EXTENSION dlock.';
  END IF;
END
$check$;

--
-- pg_dump run by the database's owner reads the lease table and the token
-- counter (they are the extension's configuration, dumped with its data).
-- The owner may read them; other roles still see leases only through
-- dlock.leases, without the owner strings of roles they cannot act for.
-- pg_database_owner exists from PostgreSQL 14 on.
--
DO $grant$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_authid
              WHERE rolname OPERATOR(pg_catalog.=) 'pg_database_owner'::pg_catalog.name) THEN
    GRANT SELECT ON TABLE dlock.lease_state TO pg_database_owner;
    GRANT SELECT ON SEQUENCE dlock.token_seq TO pg_database_owner;
  END IF;
END
$grant$;

--
-- dlock.holder: the role that holds a lease, stored as the role's OID like
-- regrole, written and read by name (see src/holder.c).  An unknown name
-- reads as "no role" (-) instead of failing, so that a dump restores into a
-- cluster that lacks some holder's role and keeps every lease, token and
-- the counter; only superusers may act on a lease with no role.
--
CREATE TYPE dlock.holder;

CREATE FUNCTION dlock.holder_in(pg_catalog.cstring)
RETURNS dlock.holder
AS 'MODULE_PATHNAME', 'dlock_holder_in'
LANGUAGE C STRICT STABLE PARALLEL SAFE;

CREATE FUNCTION dlock.holder_out(dlock.holder)
RETURNS pg_catalog.cstring
AS 'MODULE_PATHNAME', 'dlock_holder_out'
LANGUAGE C STRICT STABLE PARALLEL SAFE;

-- No binary input or output: a role OID from another cluster means nothing
CREATE TYPE dlock.holder (
  INPUT = dlock.holder_in,
  OUTPUT = dlock.holder_out,
  INTERNALLENGTH = 4,
  PASSEDBYVALUE,
  ALIGNMENT = int4,
  STORAGE = plain
);
COMMENT ON TYPE dlock.holder IS
  'Role that holds a lease: its name, or - for no role (a role unknown when the lease was restored); only superusers act on leases with no role.';

-- Same representation as oid and regrole
CREATE CAST (dlock.holder AS pg_catalog.oid) WITHOUT FUNCTION;
CREATE CAST (pg_catalog.oid AS dlock.holder) WITHOUT FUNCTION;
CREATE CAST (dlock.holder AS pg_catalog.regrole) WITHOUT FUNCTION;
CREATE CAST (pg_catalog.regrole AS dlock.holder) WITHOUT FUNCTION;

-- Comparisons as of the OIDs, so that the column can be compared, grouped
-- and sorted (EXCEPT, DISTINCT, ORDER BY) like the regrole column of 1.0
CREATE FUNCTION dlock.holder_eq(dlock.holder, dlock.holder) RETURNS boolean
AS 'oideq' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION dlock.holder_ne(dlock.holder, dlock.holder) RETURNS boolean
AS 'oidne' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION dlock.holder_lt(dlock.holder, dlock.holder) RETURNS boolean
AS 'oidlt' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION dlock.holder_le(dlock.holder, dlock.holder) RETURNS boolean
AS 'oidle' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION dlock.holder_gt(dlock.holder, dlock.holder) RETURNS boolean
AS 'oidgt' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION dlock.holder_ge(dlock.holder, dlock.holder) RETURNS boolean
AS 'oidge' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION dlock.holder_cmp(dlock.holder, dlock.holder) RETURNS integer
AS 'btoidcmp' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION dlock.holder_hash(dlock.holder) RETURNS integer
AS 'hashoid' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;

CREATE OPERATOR dlock.= (
  LEFTARG = dlock.holder, RIGHTARG = dlock.holder, FUNCTION = dlock.holder_eq,
  COMMUTATOR = OPERATOR(dlock.=), NEGATOR = OPERATOR(dlock.<>),
  RESTRICT = pg_catalog.eqsel, JOIN = pg_catalog.eqjoinsel, HASHES, MERGES
);
CREATE OPERATOR dlock.<> (
  LEFTARG = dlock.holder, RIGHTARG = dlock.holder, FUNCTION = dlock.holder_ne,
  COMMUTATOR = OPERATOR(dlock.<>), NEGATOR = OPERATOR(dlock.=),
  RESTRICT = pg_catalog.neqsel, JOIN = pg_catalog.neqjoinsel
);
CREATE OPERATOR dlock.< (
  LEFTARG = dlock.holder, RIGHTARG = dlock.holder, FUNCTION = dlock.holder_lt,
  COMMUTATOR = OPERATOR(dlock.>), NEGATOR = OPERATOR(dlock.>=),
  RESTRICT = pg_catalog.scalarltsel, JOIN = pg_catalog.scalarltjoinsel
);
CREATE OPERATOR dlock.<= (
  LEFTARG = dlock.holder, RIGHTARG = dlock.holder, FUNCTION = dlock.holder_le,
  COMMUTATOR = OPERATOR(dlock.>=), NEGATOR = OPERATOR(dlock.>),
  RESTRICT = pg_catalog.scalarlesel, JOIN = pg_catalog.scalarlejoinsel
);
CREATE OPERATOR dlock.> (
  LEFTARG = dlock.holder, RIGHTARG = dlock.holder, FUNCTION = dlock.holder_gt,
  COMMUTATOR = OPERATOR(dlock.<), NEGATOR = OPERATOR(dlock.<=),
  RESTRICT = pg_catalog.scalargtsel, JOIN = pg_catalog.scalargtjoinsel
);
CREATE OPERATOR dlock.>= (
  LEFTARG = dlock.holder, RIGHTARG = dlock.holder, FUNCTION = dlock.holder_ge,
  COMMUTATOR = OPERATOR(dlock.<=), NEGATOR = OPERATOR(dlock.<),
  RESTRICT = pg_catalog.scalargesel, JOIN = pg_catalog.scalargejoinsel
);

CREATE OPERATOR CLASS dlock.holder_ops DEFAULT FOR TYPE dlock.holder USING btree AS
  OPERATOR 1 dlock.<,
  OPERATOR 2 dlock.<=,
  OPERATOR 3 dlock.=,
  OPERATOR 4 dlock.>=,
  OPERATOR 5 dlock.>,
  FUNCTION 1 dlock.holder_cmp(dlock.holder, dlock.holder);
CREATE OPERATOR CLASS dlock.holder_ops DEFAULT FOR TYPE dlock.holder USING hash AS
  OPERATOR 1 dlock.=,
  FUNCTION 1 dlock.holder_hash(dlock.holder);

--
-- The lease table's holder_role becomes dlock.holder.  The cast is binary,
-- so the table is not rewritten: every row keeps its owner, token, expiry
-- and lock-delay, and the C code reads the column as an OID either way.
-- The view dlock.leases depends on the column; it is replaced (not dropped,
-- so that views built on it survive) by a version that does not read the
-- column, until the definition over dlock.lease_states() below replaces it
-- with its columns as before (holder_role still a regrole).  All of it
-- commits at once, so no one sees the stand-in.
--
CREATE OR REPLACE VIEW dlock.leases AS
SELECT s.name,
       s.token,
       NULL::text AS owner,
       NULL::pg_catalog.regrole AS holder_role,
       s.acquired_at,
       s.expires_at,
       NULL::text AS state,
       s.ended_at,
       NULL::timestamptz AS grantable_at,
       s.lock_delay,
       s.session_bound,
       s.holder_pid
  FROM dlock.lease_state s;

ALTER TABLE dlock.lease_state
  ALTER COLUMN holder_role TYPE dlock.holder USING holder_role::dlock.holder;

--
-- A value that the holder of a lease publishes (a leader's address), set
-- by try_acquire, acquire and renew.  Unlike owner, it is shown to every
-- role that may read dlock.leases: it is meant to be found.  Existing rows
-- get NULL; the table is not rewritten.
--
ALTER TABLE dlock.lease_state ADD COLUMN value text;

--
-- Several holders per name: shared leases and the permits of counting
-- semaphores.  Each holder's lease is a row in one of the name's slots,
-- which are reused, so the table holds one row per name and concurrent
-- holder, never one per grant (see src/lease_status.c).  An exclusive lease
-- is in slot 0, where every existing row stays; the new columns get their
-- defaults without a rewrite.  The key becomes (name, slot), under the same
-- name.
--
ALTER TABLE dlock.lease_state
  ADD COLUMN slot integer NOT NULL DEFAULT 0,
  ADD COLUMN shared boolean NOT NULL DEFAULT false,
  ADD COLUMN max_holders integer NOT NULL DEFAULT 1;
ALTER TABLE dlock.lease_state
  DROP CONSTRAINT lease_state_pkey,
  ADD CONSTRAINT lease_state_pkey PRIMARY KEY (name, slot);

--
-- dlock.leases is computed by the same C code as the lease functions:
-- dlock.lease_states() classifies each row as they do (src/lease_status.c),
-- so the view shows the state that try_acquire, renew, release and fence()
-- act on.  It reads the table through the caller's snapshot, as the SQL
-- view of 1.0 did, with the state of the moment of the call, and shows
-- owner only for leases whose holder role the caller has the privileges of.
-- Like the view, it is for every role: EXECUTE stays granted to PUBLIC, as
-- for the other lease functions (a view calls functions with the caller's
-- rights).  The view keeps its columns, their types and name's collation,
-- so views built on it survive; 1.0's definition still works with this
-- module, for databases not yet updated.
--
CREATE FUNCTION dlock.lease_states(
  OUT name text, OUT token bigint, OUT owner text,
  OUT holder_role pg_catalog.regrole, OUT acquired_at timestamptz,
  OUT expires_at timestamptz, OUT state text, OUT ended_at timestamptz,
  OUT grantable_at timestamptz, OUT lock_delay interval,
  OUT session_bound boolean, OUT holder_pid integer, OUT value text,
  OUT shared boolean, OUT max_holders integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_lease_states'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION dlock.lease_states() IS
  'Every lease (one row per holder of a name) with its state now, as the lease functions see it: the rows of dlock.leases. owner is NULL for leases of roles whose privileges the caller does not have.';

CREATE OR REPLACE VIEW dlock.leases AS
SELECT l.name COLLATE pg_catalog."C" AS name,
       l.token,
       l.owner,
       l.holder_role,
       l.acquired_at,
       l.expires_at,
       l.state,
       l.ended_at,
       l.grantable_at,
       l.lock_delay,
       l.session_bound,
       l.holder_pid,
       l.value,
       l.shared,
       l.max_holders
  FROM dlock.lease_states() l;

--
-- dlock.purge(): deletes the rows of names whose lease ended at least
-- older_than ago, that nobody waits for and that no open transaction has
-- fenced or is changing; at most 1000 per call (see src/purge.c).  A
-- purged name's old tokens stay false in dlock.fence(), and its next grant
-- gets a token larger than every token issued before.  It deletes the
-- history of every role's leases, so it is for superusers and roles with
-- the privileges of the database's owner; the function checks that itself
-- (EXECUTE stays granted to PUBLIC, as for the other functions).
--
CREATE FUNCTION dlock.purge(older_than interval DEFAULT '1 day')
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_purge'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION dlock.purge(interval) IS
  'Deletes the state of up to 1000 names whose lease ended (released, expired, force-released or session ended, and past its lock-delay) at least older_than ago, that nobody waits for and that no open transaction has fenced or is changing; returns how many. Call it again, in a new transaction, while it returns 1000.';

--
-- Observability: dlock.locks decodes dlock's entries of pg_locks, and
-- dlock.stats shows per-name statistics kept in shared memory (only when
-- dlock is in shared_preload_libraries; see src/stats.c).
--
-- A name's locks are keyed by a 64-bit hash of the name, which
-- dlock.name_key() computes; a session-bound holder's lock is keyed by the
-- token.  dlock.locks finds the name by matching the keys against the names
-- in dlock.lease_state, so the name of a lock is known once the name has a
-- committed row (a name's first grant shows NULL until it commits).  Like
-- dlock.leases it shows names to every role, and no owners.
--
CREATE FUNCTION dlock.name_key(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_name_key'
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION dlock.name_key(text) IS
  'The 64-bit key of the locks of lease name: pg_locks shows its high 32 bits in classid and its low 32 bits in objid.';

-- pg_locks.waitstart exists from PostgreSQL 14 on
DO $locks$
BEGIN
  EXECUTE pg_catalog.format($view$
CREATE VIEW dlock.locks AS
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
                              WHEN 17489 THEN 'claim' ELSE 'session' END AS kind,
              l.objsubid OPERATOR(pg_catalog.=) ANY ('{17486,17488}'::pg_catalog.int2[]) AS by_token,
              (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
                OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8 AS key) k
  LEFT JOIN (SELECT DISTINCT s.name, dlock.name_key(s.name) AS key FROM dlock.lease_state s) n
         ON NOT k.by_token AND n.key OPERATOR(pg_catalog.=) k.key
  LEFT JOIN dlock.lease_state t
         ON k.by_token AND t.token OPERATOR(pg_catalog.=) k.key
 WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
   AND l.objsubid OPERATOR(pg_catalog.=) ANY ('{17484,17485,17486,17487,17488,17489}'::pg_catalog.int2[])
   AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                         WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
$view$,
    CASE WHEN pg_catalog.current_setting('server_version_num')::pg_catalog.int4 OPERATOR(pg_catalog.>=) 140000
         THEN 'l.waitstart' ELSE 'NULL::pg_catalog.timestamptz' END);
END
$locks$;
COMMENT ON VIEW dlock.locks IS
  'dlock''s locks in pg_locks for this database. kind: name (a name''s state: AccessShareLock for a true fence, ShareUpdateExclusiveLock for a change, AccessExclusiveLock for a grant), queue (ExclusiveLock: the head of the name''s queue of waiters), session (ExclusiveLock of a session-bound holder, key token), watch (AccessShareLock of a session in dlock.watch()) pin (the token of a shared lease or permit outside slot 0: AccessShareLock for a true fence, AccessExclusiveLock for a grant that waits for it or claims its slot) or claim (a slot or an owner claimed by a shared grant; name NULL). name: the lease name, once it has a committed row. waitstart: since when a lock that is not granted has been waited for.';
GRANT SELECT ON dlock.locks TO PUBLIC;

--
-- Statistics since the last reset, per name in this database: counted when
-- they happen, including calls whose transaction rolled back.  Reading them
-- without preloading fails (55000) rather than showing nothing.
--
CREATE FUNCTION dlock.stats(
  OUT name text, OUT grants bigint, OUT refusals bigint, OUT renewals bigint,
  OUT waits bigint, OUT wait_time_total_ms double precision,
  OUT wait_time_max_ms double precision, OUT timeouts bigint,
  OUT released bigint, OUT expired bigint, OUT force_released bigint,
  OUT session_ended bigint, OUT fence_ok bigint, OUT fence_refused bigint,
  OUT last_grant_at timestamptz, OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_stats'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION dlock.stats() IS
  'Per-name statistics of this database since they were last reset: the rows of dlock.stats. Needs dlock in shared_preload_libraries.';

CREATE VIEW dlock.stats AS
SELECT s.name, s.grants, s.refusals, s.renewals, s.waits,
       s.wait_time_total_ms, s.wait_time_max_ms, s.timeouts, s.released,
       s.expired, s.force_released, s.session_ended, s.fence_ok,
       s.fence_refused, s.last_grant_at, s.since
  FROM dlock.stats() s;
COMMENT ON VIEW dlock.stats IS
  'Per-name statistics since the last reset or server start (attempts, including rolled-back ones): grants (new tokens), refusals (try_acquire NULL), renewals, waits and their time, timeouts, released, expired and session_ended (found ended without a release), force_released, fence_ok and fence_refused (fence decisions). The least active names are forgotten beyond dlock.stats_max; since: when the name''s entry was made. Needs dlock in shared_preload_libraries.';
GRANT SELECT ON dlock.stats TO PUBLIC;

CREATE FUNCTION dlock.stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'dlock_stats_reset'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION dlock.stats_reset() IS
  'Forgets the statistics of this database''s lease names. Superusers only, unless granted.';
REVOKE EXECUTE ON FUNCTION dlock.stats_reset() FROM PUBLIC;

--
-- The lease functions no longer pin search_path.  A SET clause makes every
-- call save, set and restore the setting, a noticeable part of a short
-- acquire and release cycle, and it guards nothing here: the functions are
-- written in C and resolve no names.  They find dlock's relations by
-- extension membership and OID (see LookupDlockRelation in
-- src/lease_store.c), and types and functions by OID; roles are not in any
-- schema.  The hijack test in sql/security.sql calls each of them, and reads
-- dlock.leases, with objects that shadow pg_catalog first on the caller's
-- search_path, and they behave exactly as with the setting pinned.
-- dlock.fence() never had the clause.  dlock--1.0.sql has shipped and is not
-- changed: a database at 1.0 keeps the clause until it is updated.
-- (try_acquire, acquire and renew are made again below, without it.)
--
ALTER FUNCTION dlock.release(text, text) RESET search_path;
ALTER FUNCTION dlock.force_release(text) RESET search_path;
ALTER FUNCTION dlock.holder_alive(bigint) RESET search_path;
ALTER FUNCTION dlock.lease_states() RESET search_path;
ALTER FUNCTION dlock.purge(pg_catalog.interval) RESET search_path;

--
-- try_acquire, acquire and renew take the value to publish (and try_acquire
-- the queue flag of polling clients, see src/places.c).  A parameter
-- cannot be added to an existing function, and an overload with one more
-- defaulted parameter would make every call that omits it ambiguous, so
-- they are dropped and made again, with the same C entry points (which
-- read value only when it is declared, so 1.0's declarations still work
-- with this module).  EXECUTE stays granted to PUBLIC.
--
DROP FUNCTION dlock.try_acquire(text, pg_catalog.interval, text, pg_catalog.interval, boolean);
CREATE FUNCTION dlock.try_acquire(name text, ttl interval, owner text DEFAULT NULL,
                                  lock_delay interval DEFAULT NULL,
                                  session_bound boolean DEFAULT false,
                                  value text DEFAULT NULL,
                                  queue boolean DEFAULT false,
                                  shared boolean DEFAULT false,
                                  max_holders integer DEFAULT 1)
RETURNS dlock.lease
AS 'MODULE_PATHNAME', 'dlock_try_acquire'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION dlock.try_acquire(text, interval, text, interval, boolean, text, boolean, boolean, integer) IS
  'Grants a lease of name for ttl at once, or returns NULL when another owner holds it, it is being changed, it is in its lock-delay, or others wait for it; never blocks. NULL owner: the server generates one. lock_delay NULL: dlock.default_lock_delay. value: published in dlock.leases (the same owner asking again keeps the old one when NULL). queue: a refused caller keeps its place in the name''s queue for ttl, and is granted in arrival order when it calls again (needs dlock in shared_preload_libraries). shared: a shared lease, live alongside other shared ones. max_holders: a permit of a counting semaphore, at most max_holders live at once.';

DROP FUNCTION dlock.acquire(text, pg_catalog.interval, text, pg_catalog.interval,
                            pg_catalog.interval, boolean);
CREATE FUNCTION dlock.acquire(name text, ttl interval, owner text DEFAULT NULL,
                              timeout interval DEFAULT NULL,
                              lock_delay interval DEFAULT NULL,
                              session_bound boolean DEFAULT false,
                              value text DEFAULT NULL,
                              shared boolean DEFAULT false,
                              max_holders integer DEFAULT 1)
RETURNS dlock.lease
AS 'MODULE_PATHNAME', 'dlock_acquire'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION dlock.acquire(text, interval, text, interval, interval, boolean, text, boolean, integer) IS
  'Grants a lease of name for ttl, waiting in arrival order (one queue for every kind) until it is free; timeout NULL waits until cancelled, 0 does not wait; raises 55P03 when the timeout passes. value: published in dlock.leases. shared: a shared lease. max_holders: a permit of a counting semaphore.';

DROP FUNCTION dlock.renew(text, text, pg_catalog.interval);
CREATE FUNCTION dlock.renew(name text, owner text, ttl interval,
                            value text DEFAULT NULL)
RETURNS dlock.lease
AS 'MODULE_PATHNAME', 'dlock_renew'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION dlock.renew(text, text, interval, text) IS
  'Extends a live lease held by owner to ttl from now, same token; NULL when owner does not hold a live lease. value, when not NULL, replaces the published value.';

--
-- Sets: several names granted all at once under one token, or none of
-- them (see src/lease_set.c).  At most 64 distinct names per call.
--
CREATE FUNCTION dlock.try_acquire_all(names text[], ttl interval, owner text DEFAULT NULL)
RETURNS SETOF dlock.lease
AS 'MODULE_PATHNAME', 'dlock_try_acquire_all'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 4;
COMMENT ON FUNCTION dlock.try_acquire_all(text[], interval, text) IS
  'Grants a lease of every distinct name for ttl at once, all under one token (one row per name), or returns no rows and changes nothing; never blocks.';

CREATE FUNCTION dlock.acquire_all(names text[], ttl interval, owner text DEFAULT NULL,
                                  timeout interval DEFAULT NULL)
RETURNS SETOF dlock.lease
AS 'MODULE_PATHNAME', 'dlock_acquire_all'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 4;
COMMENT ON FUNCTION dlock.acquire_all(text[], interval, text, interval) IS
  'Grants a lease of every distinct name for ttl, all under one token, waiting in arrival order on each name; never deadlocks with other acquires. Raises 55P03, holding none of them, when the timeout passes.';

CREATE FUNCTION dlock.release_all(names text[], owner text)
RETURNS integer
AS 'MODULE_PATHNAME', 'dlock_release_all'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION dlock.release_all(text[], text) IS
  'Releases each of the names whose lease owner holds live; returns how many it released.';

--
-- Watching: wait for the live lease of a name to change, woken by the
-- commit that changes it or by its expiry, not by polling.
--
CREATE FUNCTION dlock.watch(name text, token bigint, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dlock_watch'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION dlock.watch(text, bigint, interval) IS
  'Returns as soon as the live token of name differs from token: the live token, or NULL when no lease is live (token NULL: waits for a live lease). Returns token when the timeout passes first; timeout NULL waits until cancelled.';
