--
-- The conflict matrix of a name's lock: the SQL edition's five modes, made
-- of transaction-level advisory locks on three keys (dlock._mode_keys()),
-- against the C edition's, which are the lock manager's modes on one
-- advisory tag and so conflict as PostgreSQL's own lock conflict table
-- says.  Both matrices are measured, cell by cell: a transaction takes the
-- held mode and is prepared, so that its locks are another transaction's,
-- and this session asks for the requested mode without waiting.
--   C edition: LOCK TABLE in the lock-manager mode, on a table of its own
--              (the same conflict table as any lock tag's)
--   SQL edition: the keys of the mode, by conditional advisory locks
-- Then the engine itself: the keys each kind of call holds, as pg_locks
-- shows them in its transaction, are those of its mode.
--
CREATE TABLE conflict_target ();
CREATE TABLE conflicts (held text, requested text, c_conflicts boolean, sql_conflicts boolean);
CREATE TABLE modes (ord int, mode text, lockmode text);
INSERT INTO modes VALUES (1, 'FENCE', 'ACCESS SHARE'), (2, 'ALONGSIDE', 'ROW EXCLUSIVE'),
  (3, 'CHANGE', 'SHARE UPDATE EXCLUSIVE'), (4, 'SERIAL', 'SHARE ROW EXCLUSIVE'),
  (5, 'GRANT', 'ACCESS EXCLUSIVE');

-- Take a mode of name 'conflicts' in this transaction (SQL edition)
CREATE FUNCTION take_sql(mode text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  k record;
BEGIN
  FOR k IN SELECT * FROM dlock._mode_keys(mode) LOOP
    IF k.exclusive THEN
      PERFORM pg_advisory_xact_lock(dlock.name_key('conflicts') # dlock._k(k.key));
    ELSE
      PERFORM pg_advisory_xact_lock_shared(dlock.name_key('conflicts') # dlock._k(k.key));
    END IF;
  END LOOP;
END $$;

-- Whether a mode would wait for the prepared transaction's locks: each is
-- asked for without waiting, in a subtransaction given back at once
CREATE FUNCTION conflicts_sql(mode text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  k record;
  ok boolean := true;
BEGIN
  BEGIN
    FOR k IN SELECT * FROM dlock._mode_keys(mode) LOOP
      IF k.exclusive THEN
        ok := ok AND pg_try_advisory_xact_lock(dlock.name_key('conflicts') # dlock._k(k.key));
      ELSE
        ok := ok AND pg_try_advisory_xact_lock_shared(dlock.name_key('conflicts') # dlock._k(k.key));
      END IF;
    END LOOP;
    RAISE SQLSTATE 'P0001';
  EXCEPTION WHEN raise_exception THEN
    NULL;
  END;
  RETURN NOT ok;
END $$;

CREATE FUNCTION conflicts_c(lockmode text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  BEGIN
    EXECUTE format('LOCK TABLE conflict_target IN %s MODE NOWAIT', lockmode);
    RAISE SQLSTATE 'P0001';
  EXCEPTION
    WHEN lock_not_available THEN
      RETURN true;
    WHEN raise_exception THEN
      RETURN false;
  END;
END $$;

CREATE FUNCTION record_row(held text) RETURNS void LANGUAGE sql AS $$
  INSERT INTO conflicts
  SELECT held, m.mode, conflicts_c(m.lockmode), conflicts_sql(m.mode) FROM modes m ORDER BY m.ord
$$;

BEGIN; LOCK TABLE conflict_target IN ACCESS SHARE MODE; SELECT take_sql('FENCE'); PREPARE TRANSACTION 'conflicts_fence';
SELECT record_row('FENCE');
ROLLBACK PREPARED 'conflicts_fence';
BEGIN; LOCK TABLE conflict_target IN ROW EXCLUSIVE MODE; SELECT take_sql('ALONGSIDE'); PREPARE TRANSACTION 'conflicts_alongside';
SELECT record_row('ALONGSIDE');
ROLLBACK PREPARED 'conflicts_alongside';
BEGIN; LOCK TABLE conflict_target IN SHARE UPDATE EXCLUSIVE MODE; SELECT take_sql('CHANGE'); PREPARE TRANSACTION 'conflicts_change';
SELECT record_row('CHANGE');
ROLLBACK PREPARED 'conflicts_change';
BEGIN; LOCK TABLE conflict_target IN SHARE ROW EXCLUSIVE MODE; SELECT take_sql('SERIAL'); PREPARE TRANSACTION 'conflicts_serial';
SELECT record_row('SERIAL');
ROLLBACK PREPARED 'conflicts_serial';
BEGIN; LOCK TABLE conflict_target IN ACCESS EXCLUSIVE MODE; SELECT take_sql('GRANT'); PREPARE TRANSACTION 'conflicts_grant';
SELECT record_row('GRANT');
ROLLBACK PREPARED 'conflicts_grant';

-- The two matrices (x: the requested mode waits for the held one)
SELECT h.mode AS "held \ requested",
       string_agg(CASE WHEN c.c_conflicts THEN 'x' ELSE '.' END, ' ' ORDER BY r.ord) AS c_edition,
       string_agg(CASE WHEN c.sql_conflicts THEN 'x' ELSE '.' END, ' ' ORDER BY r.ord) AS sql_edition
  FROM conflicts c JOIN modes h ON h.mode = c.held JOIN modes r ON r.mode = c.requested
 GROUP BY h.ord, h.mode ORDER BY h.ord;
-- Cell by cell: every cell equal
SELECT count(*) AS cells, count(*) FILTER (WHERE c_conflicts = sql_conflicts) AS equal_cells
  FROM conflicts;

--
-- The engine takes these keys: the name locks each call holds in its
-- transaction, as keys and modes (S shared, X exclusive)
--
CREATE FUNCTION my_name_keys(n text) RETURNS text LANGUAGE sql AS $$
  SELECT coalesce(string_agg(k.key || ':' || CASE l.mode WHEN 'ExclusiveLock' THEN 'X' ELSE 'S' END,
                             ' ' ORDER BY k.key, l.mode), '-')
    FROM pg_locks l
    JOIN (VALUES ('n1'), ('n2'), ('n3')) k(key)
      ON ((l.classid::bigint << 32) | l.objid::bigint) = dlock.name_key(n) # dlock._k(k.key)
   WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.pid = pg_backend_pid() AND l.granted
$$;
CREATE FUNCTION mode_keys(mode text) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(k.key || ':' || CASE WHEN k.exclusive THEN 'X' ELSE 'S' END, ' ' ORDER BY k.key, NOT k.exclusive)
    FROM dlock._mode_keys(mode) k
$$;
SELECT token AS ck_token FROM dlock.try_acquire('ck:x', '1h', 'o') \gset
SELECT token AS ck_shared FROM dlock.try_acquire('ck:s', '1h', 'o1', shared => true) \gset
SELECT token FROM dlock.try_acquire('ck:s', '1h', 'o2', shared => true) \gset
-- a grant into slot 0 (GRANT, and SERIAL, which GRANT contains)
BEGIN;
SELECT owner FROM dlock.try_acquire('ck:new', '1h', 'o');
SELECT my_name_keys('ck:new') AS grant_holds, mode_keys('GRANT') AS grant_mode, mode_keys('SERIAL') AS serial_mode;
ROLLBACK;
-- a true fence of an exclusive lease (FENCE)
BEGIN;
SELECT dlock.fence('ck:x', :ck_token);
SELECT my_name_keys('ck:x') AS fence_holds, mode_keys('FENCE') AS fence_mode;
ROLLBACK;
-- a renew (CHANGE)
BEGIN;
SELECT owner FROM dlock.renew('ck:x', 'o', '1h');
SELECT my_name_keys('ck:x') AS renew_holds, mode_keys('CHANGE') AS change_mode;
ROLLBACK;
-- a shared lease granted alongside the others (ALONGSIDE)
BEGIN;
SELECT owner FROM dlock.try_acquire('ck:s', '1h', 'o3', shared => true);
SELECT my_name_keys('ck:s') AS alongside_holds, mode_keys('ALONGSIDE') AS alongside_mode;
ROLLBACK;
-- a force_release (SERIAL)
BEGIN;
SELECT dlock.force_release('ck:x');
SELECT my_name_keys('ck:x') AS force_release_holds, mode_keys('SERIAL') AS serial_mode;
ROLLBACK;
-- a purge holds GRANT on the names it deletes
SELECT dlock.release('ck:x', 'o');
BEGIN;
SELECT dlock.purge('0') >= 1 AS purged;
SELECT my_name_keys('ck:x') AS purge_holds, mode_keys('GRANT') AS grant_mode;
ROLLBACK;

DELETE FROM dlock.lease_state WHERE name LIKE 'ck:%';
DROP FUNCTION my_name_keys(text), mode_keys(text), record_row(text), conflicts_c(text),
  conflicts_sql(text), take_sql(text);
DROP TABLE conflicts, modes, conflict_target;
