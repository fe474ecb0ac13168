/*
 * to-c-edition.sql - move a database from the SQL edition of dlock to the C
 * edition (the extension), keeping every lease and the token counter.
 *
 * Run as a superuser (CREATE EXTENSION dlock needs one), in the database,
 * on a server where the C edition is installed (its files, version 1.3):
 *
 *     psql -v ON_ERROR_STOP=1 -d app -f sql-edition/move/to-c-edition.sql
 *
 * One transaction.  It locks dlock.lease_state, which waits for every
 * transaction that has read or written a lease (a fenced write, a grant, a
 * release, a waiting acquire() or watch()) to end; copies every row of the
 * lease table and the counter's value aside; drops schema dlock; runs
 * CREATE EXTENSION dlock VERSION '1.3'; writes the rows back, each with its
 * name, slot, token, owner, holder role, times, lock-delay, value and kind;
 * sets the counter to at least its old value and every token in a row; and
 * updates the extension to its default version.  No token changes, so a
 * fence of a live token is true after the move as before, and of an ended
 * one false; the move is a new incarnation of the counter (docs/internals.md,
 * I1), so the first grant after it moves the counter up to the clock, never
 * down.
 *
 * It refuses (and changes nothing) when a prepared transaction holds the
 * lease table (COMMIT or ROLLBACK PREPARED it first), when a session-bound
 * lease's holder still runs (a session-bound lease is bound to a lock of its
 * holder's session that the other edition cannot see), when objects outside
 * schema dlock depend on the SQL edition's (a view on dlock.leases), and
 * when the lock is not had within move_lock_timeout (default 1min; -v
 * move_lock_timeout=10s), naming the sessions that hold it.  A call of a
 * dlock function that is waiting for the lock when the move commits fails
 * with an error, having changed nothing: retry it.
 *
 * sql-edition/README.md, "Moving between editions", has the whole procedure.
 *
 * Copyright (c) 2026, dlock developers
 */

\set ON_ERROR_STOP 1
\set QUIET on
\if :{?move_lock_timeout}
\else
\set move_lock_timeout 1min
\endif

BEGIN;
SET LOCAL search_path = pg_catalog, pg_temp;
SET LOCAL client_min_messages = warning;
SET LOCAL lock_timeout = :'move_lock_timeout';

DO $check$
DECLARE
  strangers text;
BEGIN
  IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
    RAISE EXCEPTION USING
      ERRCODE = 'insufficient_privilege',
      MESSAGE = 'moving to the C edition of dlock needs a superuser',
      DETAIL = 'CREATE EXTENSION dlock is for superusers.',
      HINT = 'Run the script as a superuser.';
  END IF;
  IF EXISTS (SELECT FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock') THEN
    RAISE EXCEPTION USING
      ERRCODE = 'duplicate_object',
      MESSAGE = 'extension dlock, the C edition of dlock, is installed in this database already';
  END IF;
  IF pg_catalog.to_regclass('dlock.lease_state') IS NULL
     OR pg_catalog.to_regclass('dlock.token_seq') IS NULL
     OR pg_catalog.to_regprocedure('dlock._token_next()') IS NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = 'object_not_in_prerequisite_state',
      MESSAGE = 'the SQL edition of dlock is not installed in this database',
      DETAIL = 'There is no schema dlock with the SQL edition''s lease table, counter and functions.',
      HINT = 'Install the C edition with CREATE EXTENSION dlock.';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_available_extension_versions v
                  WHERE v.name = 'dlock' AND v.version = '1.3') THEN
    RAISE EXCEPTION USING
      ERRCODE = 'feature_not_supported',
      MESSAGE = 'the C edition of dlock, version 1.3, is not installed on this server',
      DETAIL = 'The SQL edition has the shape of the C edition at 1.3; the move creates the extension at 1.3 and then updates it.',
      HINT = 'Install the C edition''s package or make install, then run the script again.';
  END IF;

  -- A prepared transaction that granted, released or fenced holds the lease
  -- table until COMMIT or ROLLBACK PREPARED: the lock would wait for it
  SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_literal(p.gid), ', ')
    INTO strangers
    FROM pg_catalog.pg_locks r
    JOIN pg_catalog.pg_locks x
      ON x.virtualtransaction = r.virtualtransaction AND x.locktype = 'transactionid'
    JOIN pg_catalog.pg_prepared_xacts p ON p.transaction = x.transactionid
   WHERE r.locktype = 'relation' AND r.pid IS NULL
     AND r.relation = 'dlock.lease_state'::pg_catalog.regclass
     AND r.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database());
  IF strangers IS NOT NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = 'object_not_in_prerequisite_state',
      MESSAGE = 'prepared transactions hold dlock''s lease table',
      DETAIL = pg_catalog.format('Prepared transactions %s granted, changed or fenced leases; their locks are the SQL edition''s, which the C edition would not see.', strangers),
      HINT = 'COMMIT PREPARED or ROLLBACK PREPARED them, then run the script again.';
  END IF;

  -- Objects of others that depend on the SQL edition's (a view on
  -- dlock.leases, a column of type dlock.lease) would be dropped with it
  WITH RECURSIVE inside(classid, objid) AS (
         SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid, c.oid
           FROM pg_catalog.pg_class c WHERE c.relnamespace = 'dlock'::pg_catalog.regnamespace
         UNION ALL
         SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid, p.oid
           FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'dlock'::pg_catalog.regnamespace
         UNION ALL
         SELECT 'pg_catalog.pg_type'::pg_catalog.regclass::pg_catalog.oid, t.oid
           FROM pg_catalog.pg_type t WHERE t.typnamespace = 'dlock'::pg_catalog.regnamespace
         UNION ALL
         SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_operator o WHERE o.oprnamespace = 'dlock'::pg_catalog.regnamespace
         UNION ALL
         SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass::pg_catalog.oid, o.oid
           FROM pg_catalog.pg_constraint o WHERE o.connamespace = 'dlock'::pg_catalog.regnamespace
         UNION
         SELECT d.classid, d.objid FROM pg_catalog.pg_depend d, inside i
          WHERE d.refclassid = i.classid AND d.refobjid = i.objid
            AND d.deptype = ANY (ARRAY['i', 'a']::pg_catalog."char"[])
       )
  SELECT pg_catalog.string_agg(DISTINCT COALESCE(
           -- a view's rule, by its view
           (SELECT pg_catalog.pg_describe_object('pg_catalog.pg_class'::pg_catalog.regclass, r.ev_class, 0)
              FROM pg_catalog.pg_rewrite r
             WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND r.oid = d.objid),
           pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)), ', ')
    INTO strangers
    FROM pg_catalog.pg_depend d
   WHERE d.deptype = 'n'
     AND EXISTS (SELECT FROM inside i WHERE i.classid = d.refclassid AND i.objid = d.refobjid)
     AND NOT EXISTS (SELECT FROM inside i WHERE i.classid = d.classid AND i.objid = d.objid);
  IF strangers IS NOT NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = 'dependent_objects_still_exist',
      MESSAGE = 'objects outside schema dlock depend on the SQL edition of dlock',
      DETAIL = pg_catalog.format('%s would be dropped with it.', strangers),
      HINT = 'Drop them first, and make them again on the C edition after the move.';
  END IF;
END
$check$;

-- The editions' names, for the messages of take.sql
SELECT pg_catalog.set_config('dlock_move.from', 'SQL', true) AS from_edition,
       pg_catalog.set_config('dlock_move.to', 'C', true) AS to_edition \gset dlock_move_
\ir take.sql

DROP SCHEMA dlock CASCADE;
CREATE EXTENSION dlock VERSION '1.3';

INSERT INTO dlock.lease_state (name, slot, token, owner, holder_role, acquired_at, expires_at,
                               ended_at, end_reason, lock_delay, session_bound, holder_pid,
                               value, shared, max_holders)
SELECT r.name, r.slot, r.token, r.owner, r.holder::dlock.holder, r.acquired_at, r.expires_at,
       r.ended_at, r.end_reason, r.lock_delay, r.session_bound, r.holder_pid,
       r.value, r.shared, r.max_holders
  FROM pg_temp.dlock_move_rows r;

-- The counter at the last token issued (or any row's, if larger): the next
-- grant takes a larger one
DO $counter$
DECLARE
  top bigint;
BEGIN
  SELECT GREATEST((SELECT c.issued FROM pg_temp.dlock_move_counter c),
                             (SELECT pg_catalog.max(r.token) FROM pg_temp.dlock_move_rows r))
    INTO top;
  IF top IS NOT NULL THEN
    PERFORM pg_catalog.setval('dlock.token_seq', top, true);
  END IF;
END
$counter$;

ALTER EXTENSION dlock UPDATE;

-- What the C edition now holds is what the SQL edition held
DO $verify$
DECLARE
  differ bigint;
  top bigint;
  counter bigint;
BEGIN
  SELECT pg_catalog.count(*) INTO differ FROM (
    (SELECT s.name, s.slot, s.token, s.owner, s.holder_role::pg_catalog.oid AS holder,
            s.acquired_at, s.expires_at, s.ended_at, s.end_reason, s.lock_delay,
            s.session_bound, s.holder_pid, s.value, s.shared, s.max_holders
       FROM dlock.lease_state s
     EXCEPT ALL
     SELECT * FROM pg_temp.dlock_move_rows)
    UNION ALL
    (SELECT * FROM pg_temp.dlock_move_rows
     EXCEPT ALL
     SELECT s.name, s.slot, s.token, s.owner, s.holder_role::pg_catalog.oid,
            s.acquired_at, s.expires_at, s.ended_at, s.end_reason, s.lock_delay,
            s.session_bound, s.holder_pid, s.value, s.shared, s.max_holders
       FROM dlock.lease_state s)) d;
  IF differ <> 0 THEN
    RAISE EXCEPTION 'the moved lease table differs from the SQL edition''s in % rows', differ;
  END IF;
  SELECT GREATEST((SELECT c.issued FROM pg_temp.dlock_move_counter c),
                             (SELECT pg_catalog.max(r.token) FROM pg_temp.dlock_move_rows r))
    INTO top;
  SELECT CASE WHEN q.is_called THEN q.last_value END INTO counter FROM dlock.token_seq q;
  IF top IS NOT NULL AND (counter IS NULL OR counter < top) THEN
    RAISE EXCEPTION 'the moved token counter (%) is below the last token issued (%)', counter, top;
  END IF;
END
$verify$;

SELECT pg_catalog.count(*) AS rows,
       pg_catalog.count(*) FILTER (WHERE l.state = 'live') AS live,
       (SELECT q.last_value FROM dlock.token_seq q) AS counter,
       (SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock') AS version
  FROM dlock.leases l
\gset move_
COMMIT;
\echo dlock: moved to the C edition :move_version: :move_rows lease rows (:move_live live), token counter at :move_counter
