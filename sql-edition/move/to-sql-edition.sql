/*
 * to-sql-edition.sql - move a database from the C edition of dlock (the
 * extension) to the SQL edition, keeping every lease and the token counter:
 * the step before a dump of the database is restored onto a managed
 * service, which cannot load the C edition.
 *
 * Run as a superuser, in the database, from a clone (it includes
 * ../dlock.sql):
 *
 *     psql -v ON_ERROR_STOP=1 -d app -f sql-edition/move/to-sql-edition.sql
 *
 * The SQL edition is installed as the database's owner, as if that role had
 * run sql-edition/dlock.sql (-v move_owner=role for another role, which
 * needs CREATE on the database).
 *
 * One transaction.  It locks dlock.lease_state, which waits for every
 * transaction that has read or written a lease (a fenced write, a grant, a
 * release, a waiting acquire() or watch()) to end; copies every row of the
 * lease table and the counter's value aside; drops extension dlock and its
 * schema; runs the SQL edition's script as the owner; writes the rows back,
 * each with its name, slot, token, owner, holder role, times, lock-delay,
 * value and kind; and sets the counter to at least its old value and every
 * token in a row.  No token changes, so a fence of a live token is true
 * after the move as before, and of an ended one false; the move is a new
 * incarnation of the counter (docs/internals.md, I1), so the first grant
 * after it moves the counter up to the clock, never down.  Places kept for
 * try_acquire(queue => true) and statistics are in the C edition's shared
 * memory and do not move.
 *
 * It refuses (and changes nothing) when the extension is not at version 1.3
 * (the SQL edition's), when a prepared transaction holds the lease table,
 * when a session-bound lease's holder still runs, when objects outside the
 * extension depend on it (DROP EXTENSION's own error), and when the lock is
 * not had within move_lock_timeout (default 1min), naming the sessions that
 * hold it.  A call of a dlock function that is waiting for the lock when
 * the move commits fails with an error, having changed nothing: retry it.
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
SET LOCAL check_function_bodies = on;
SET LOCAL lock_timeout = :'move_lock_timeout';

\if :{?move_owner}
\else
SELECT pg_catalog.pg_get_userbyid(d.datdba) AS move_owner
  FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()
\gset
\endif

DO $check$
DECLARE
  strangers text;
  version text;
BEGIN
  IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
    RAISE EXCEPTION USING
      ERRCODE = 'insufficient_privilege',
      MESSAGE = 'moving to the SQL edition of dlock needs a superuser',
      DETAIL = 'The move drops extension dlock and installs the SQL edition as the database''s owner.',
      HINT = 'Run the script as a superuser.';
  END IF;
  SELECT e.extversion INTO version FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock';
  IF NOT FOUND THEN
    RAISE EXCEPTION USING
      ERRCODE = 'object_not_in_prerequisite_state',
      MESSAGE = 'extension dlock, the C edition of dlock, is not installed in this database',
      HINT = CASE WHEN pg_catalog.to_regclass('dlock.lease_state') IS NOT NULL
                  THEN 'The SQL edition is installed already.'
                  ELSE 'Install the SQL edition with sql-edition/dlock.sql.' END;
  END IF;
  IF version <> '1.3' THEN
    RAISE EXCEPTION USING
      ERRCODE = 'feature_not_supported',
      MESSAGE = pg_catalog.format('extension dlock is at version %s; the SQL edition is version 1.3', version),
      HINT = CASE WHEN version < '1.3' THEN 'ALTER EXTENSION dlock UPDATE TO ''1.3'' first.'
                  ELSE 'Use the SQL edition of the same version as the extension.' END;
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
      DETAIL = pg_catalog.format('Prepared transactions %s granted, changed or fenced leases; their locks are the C edition''s, which the SQL edition would not see.', strangers),
      HINT = 'COMMIT PREPARED or ROLLBACK PREPARED them, then run the script again.';
  END IF;
END
$check$;

-- The editions' names, for the messages of take.sql
SELECT pg_catalog.set_config('dlock_move.from', 'C', true) AS from_edition,
       pg_catalog.set_config('dlock_move.to', 'SQL', true) AS to_edition \gset dlock_move_
\ir take.sql

-- Without CASCADE: objects of others that depend on the extension (a view
-- on dlock.leases) make it fail; the schema, which CREATE EXTENSION made and
-- which is not the extension's, holds nothing else (the extension refuses
-- a schema with objects of others)
DROP EXTENSION dlock;
DROP SCHEMA dlock;

-- The SQL edition, installed by its owner inside this transaction
SET LOCAL ROLE :"move_owner";
\set dlock_inside_transaction
\ir ../dlock.sql
\unset dlock_inside_transaction
RESET ROLE;

INSERT INTO dlock.lease_state (name, slot, token, owner, holder_role, acquired_at, expires_at,
                               ended_at, end_reason, lock_delay, session_bound, holder_pid,
                               value, shared, max_holders)
SELECT r.name, r.slot, r.token, r.owner, r.holder::pg_catalog.regrole::dlock.holder,
       r.acquired_at, r.expires_at, r.ended_at, r.end_reason, r.lock_delay,
       r.session_bound, r.holder_pid, r.value, r.shared, r.max_holders
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

-- What the SQL edition now holds is what the C edition held
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
    RAISE EXCEPTION 'the moved lease table differs from the C edition''s in % rows', differ;
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
       (SELECT q.last_value FROM dlock.token_seq q) AS counter
  FROM dlock.leases l
\gset move_
COMMIT;
\echo dlock: moved to the SQL edition, owned by :move_owner: :move_rows lease rows (:move_live live), token counter at :move_counter
