-- sql-edition/move/take.sql: what both moves do before they swap the
-- editions, included by to-c-edition.sql and to-sql-edition.sql (\ir), in
-- their transaction, once they have set dlock_move.from and dlock_move.to
-- (the editions' names, for the messages): the lease table locked, live
-- session-bound leases refused, and every row and the counter copied aside
-- into pg_temp.dlock_move_rows and pg_temp.dlock_move_counter.

-- Wait for every transaction that read or wrote a lease (its lock on the
-- table lasts to its end), and keep new ones out: no row or counter value
-- changes between the copy below and the drop, and no fence taken in the
-- old edition's lock space is still open when the new one starts to grant
DO $lock$
DECLARE
  holders text;
BEGIN
  LOCK TABLE dlock.lease_state IN ACCESS EXCLUSIVE MODE;
EXCEPTION WHEN lock_not_available THEN
  SELECT pg_catalog.string_agg(DISTINCT pg_catalog.format('pid %s (%s, transaction started %s)',
                                                          l.pid, a.state, a.xact_start), '; ')
    INTO holders
    FROM pg_catalog.pg_locks l
    LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
   WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
     AND l.relation = 'dlock.lease_state'::pg_catalog.regclass;
  RAISE EXCEPTION USING
    ERRCODE = 'lock_not_available',
    MESSAGE = 'could not lock dlock''s lease table within move_lock_timeout',
    DETAIL = pg_catalog.format('Sessions whose transactions use dlock: %s.', COALESCE(holders, 'none any more')),
    HINT = 'A transaction that fenced a write, or granted, or waits in dlock.acquire() or dlock.watch(), holds the lease table until it ends. Let them end, or run again with a longer -v move_lock_timeout=...';
END
$lock$;

-- A live session-bound lease cannot move: its holder holds a lock in the
-- old edition's lock space that the new one does not look at, so the
-- lease would be session_ended, and its name grantable, at once
DO $session$
DECLARE
  bound text;
BEGIN
  SELECT pg_catalog.string_agg(pg_catalog.format('"%s" (token %s)', s.name, s.token), ', ' ORDER BY s.name, s.slot)
    INTO bound
    FROM dlock.lease_state s
   WHERE s.session_bound AND s.ended_at IS NULL
     AND s.expires_at + s.lock_delay > pg_catalog.clock_timestamp()
     AND dlock.holder_alive(s.token);
  IF bound IS NOT NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = 'object_not_in_prerequisite_state',
      MESSAGE = pg_catalog.format('session-bound leases cannot move to the %s edition',
                                  pg_catalog.current_setting('dlock_move.to')),
      DETAIL = pg_catalog.format('The holders of %s still run; a session-bound lease lives while its holder''s session holds a lock of the %s edition, which the %s edition would not see.',
                                 bound, pg_catalog.current_setting('dlock_move.from'),
                                 pg_catalog.current_setting('dlock_move.to')),
      HINT = 'Release them, or end their holders'' sessions, then run the script again.';
  END IF;
END
$session$;

-- Aside, in this session: every row (the holder by its OID, which names the
-- same role in both editions) and the counter
CREATE TEMP TABLE dlock_move_rows ON COMMIT DROP AS
SELECT s.name, s.slot, s.token, s.owner, s.holder_role::pg_catalog.oid AS holder,
       s.acquired_at, s.expires_at, s.ended_at, s.end_reason, s.lock_delay,
       s.session_bound, s.holder_pid, s.value, s.shared, s.max_holders
  FROM dlock.lease_state s;
CREATE TEMP TABLE dlock_move_counter ON COMMIT DROP AS
SELECT CASE WHEN q.is_called THEN q.last_value END AS issued
  FROM dlock.token_seq q;
