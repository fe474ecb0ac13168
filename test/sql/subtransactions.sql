--
-- Subtransactions and two-phase commit, in one session: everything dlock
-- keeps for the rest of a transaction (fence answers, session locks to give
-- back, wake-ups, session-bound grants) follows ROLLBACK TO SAVEPOINT, a
-- caught PL/pgSQL exception, PREPARE TRANSACTION and COMMIT PREPARED.
-- Races between sessions are in test/specs/, standbys in test/t/011_edges.pl.
--
CREATE FUNCTION session_locks() RETURNS bigint LANGUAGE sql AS $$
  SELECT count(*) FROM dlock.locks
   WHERE kind = 'session' AND pid = pg_catalog.pg_backend_pid()
$$;

-- A grant rolled back to a savepoint: its token fences false afterwards,
-- also when fence() answered true for it before the rollback
BEGIN;
SAVEPOINT s;
SELECT token AS sp_token FROM dlock.try_acquire('sub:a', '1h', 'w') \gset
SELECT dlock.fence('sub:a', :sp_token) AS fenced_in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT dlock.fence('sub:a', :sp_token) AS fenced_after_rollback;
COMMIT;
SELECT count(*) AS sub_a_rows FROM dlock.leases WHERE name = 'sub:a';

-- The mirror: a release rolled back to a savepoint leaves the token live
SELECT token AS live_token FROM dlock.try_acquire('sub:b', '1h', 'w') \gset
BEGIN;
SAVEPOINT s;
SELECT dlock.release('sub:b', 'w') AS released;
SELECT dlock.fence('sub:b', :live_token) AS fenced_after_release;
ROLLBACK TO SAVEPOINT s;
SELECT dlock.fence('sub:b', :live_token) AS fenced_after_rollback;
COMMIT;

-- Nested: a change in a committed inner savepoint is undone with the outer
BEGIN;
SAVEPOINT outer_sp;
SAVEPOINT inner_sp;
SELECT dlock.release('sub:b', 'w') AS released;
RELEASE SAVEPOINT inner_sp;
SELECT dlock.fence('sub:b', :live_token) AS fenced_after_release;
ROLLBACK TO SAVEPOINT outer_sp;
SELECT dlock.fence('sub:b', :live_token) AS fenced_after_outer_rollback;
COMMIT;
-- A rolled-back sibling savepoint does not undo an earlier change
BEGIN;
SAVEPOINT first_sp;
SELECT dlock.release('sub:b', 'w') AS released;
RELEASE SAVEPOINT first_sp;
SAVEPOINT second_sp;
SELECT dlock.fence('sub:b', :live_token) AS fenced_after_release;
ROLLBACK TO SAVEPOINT second_sp;
SELECT dlock.fence('sub:b', :live_token) AS still_fenced_false;
ROLLBACK;

-- A session-bound lease whose release is rolled back to a savepoint, or
-- inside a PL/pgSQL block whose exception is caught, stays held: its
-- session lock is kept, and it is live after the commit
SELECT token AS sb_token FROM dlock.try_acquire('sub:sb', '1h', 'w', session_bound => true) \gset
BEGIN;
SAVEPOINT s;
SELECT dlock.release('sub:sb', 'w') AS released;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT state FROM dlock.leases WHERE name = 'sub:sb';
DO $$
BEGIN
  BEGIN
    PERFORM dlock.release('sub:sb', 'w');
    RAISE EXCEPTION 'job failed';
  EXCEPTION WHEN raise_exception THEN
    RAISE NOTICE 'caught: %', SQLERRM;
  END;
END $$;
SELECT state FROM dlock.leases WHERE name = 'sub:sb';
SELECT session_locks() AS session_locks_held;
-- A release that commits gives the lock back
SELECT dlock.release('sub:sb', 'w') AS released;
SELECT session_locks() AS session_locks_after_release;

-- A session-bound grant rolled back to a savepoint gives its lock back at
-- once; the grant kept beside it keeps its own
BEGIN;
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:sb1', '1h', 'w', session_bound => true)) AS kept;
SAVEPOINT s;
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:sb2', '1h', 'w', session_bound => true)) AS rolled_back;
SELECT session_locks() AS session_locks_in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT session_locks() AS session_locks_after_rollback;
COMMIT;
SELECT name, state FROM dlock.leases WHERE name LIKE 'sub:sb_' ORDER BY name;
SELECT dlock.release('sub:sb1', 'w') AS released;

-- DISCARD ALL ends this session's session-bound leases; the next
-- session-bound grant works without a warning
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:d1', '1h', 'w', session_bound => true)) AS granted;
DISCARD ALL;
SELECT state FROM dlock.leases WHERE name = 'sub:d1';
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:d2', '1h', 'w', session_bound => true)) AS granted;
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:d3', '1h', 'w', session_bound => true)) AS granted;
SELECT name, state FROM dlock.leases WHERE name LIKE 'sub:d_' ORDER BY name;
SELECT session_locks() AS session_locks_held;
SELECT dlock.release('sub:d2', 'w') AND dlock.release('sub:d3', 'w') AS released;

-- Two-phase commit: a session-bound grant cannot be prepared (the lease
-- would follow this backend while another one decides its fate) ...
BEGIN;
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:2pc-sb', '1h', 'w', session_bound => true)) AS granted;
PREPARE TRANSACTION 'dlock_sub_sb';
SELECT count(*) AS rows_after_refused_prepare FROM dlock.leases WHERE name = 'sub:2pc-sb';
SELECT session_locks() AS session_locks_after_refused_prepare;
-- ... unless it was rolled back to a savepoint first
BEGIN;
SAVEPOINT s;
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:2pc-sb', '1h', 'w', session_bound => true)) AS granted;
ROLLBACK TO SAVEPOINT s;
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:2pc', '1h', 'w')) AS granted;
PREPARE TRANSACTION 'dlock_sub_plain';
COMMIT PREPARED 'dlock_sub_plain';
SELECT name, state FROM dlock.leases WHERE name LIKE 'sub:2pc%' ORDER BY name;
-- A fence answer does not outlive PREPARE: the next transaction asks again
SELECT token AS p_token FROM dlock.leases WHERE name = 'sub:2pc' \gset
BEGIN;
SELECT dlock.fence('sub:2pc', :p_token) AS fenced;
SELECT dlock.release('sub:2pc', 'w') AS released;
PREPARE TRANSACTION 'dlock_sub_release';
SELECT state FROM dlock.leases WHERE name = 'sub:2pc';
SELECT dlock.fence('sub:2pc', :p_token) AS fenced_while_release_prepared;
COMMIT PREPARED 'dlock_sub_release';
SELECT dlock.fence('sub:2pc', :p_token) AS fenced_after_commit_prepared;
-- A session-bound lease released through two-phase commit: the session
-- lock is given back once the release is seen committed
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:2pc-sbr', '1h', 'w', session_bound => true)) AS granted;
BEGIN;
SELECT dlock.release('sub:2pc-sbr', 'w') AS released;
PREPARE TRANSACTION 'dlock_sub_sb_release';
SELECT state FROM dlock.leases WHERE name = 'sub:2pc-sbr';
COMMIT PREPARED 'dlock_sub_sb_release';
SELECT state FROM dlock.leases WHERE name = 'sub:2pc-sbr';
SELECT EXISTS (SELECT FROM dlock.try_acquire('sub:2pc-sbr2', '1h', 'w', session_bound => true)) AS granted;
SELECT session_locks() AS session_locks_held;
SELECT dlock.release('sub:2pc-sbr2', 'w') AS released;

-- The fence cache is bounded: a transaction that is refused a great many
-- distinct stale tokens keeps only a bounded number of answers
BEGIN;
SELECT count(*) FILTER (WHERE dlock.fence('sub:a', t)) AS fenced
  FROM generate_series(1, 20000) t;
-- (PostgreSQL 13 has no pg_backend_memory_contexts: subtransactions_1.out)
SELECT sum(total_bytes) < 512 * 1024 AS fence_cache_bounded
  FROM pg_backend_memory_contexts WHERE name = 'dlock fence cache';
COMMIT;

-- dlock.default_lock_delay is bounded by dlock.max_ttl, as lock_delay is
SET dlock.default_lock_delay = '2d';
SET dlock.max_ttl = '3d';
SET dlock.default_lock_delay = '2d';
RESET dlock.max_ttl;
SELECT dlock.try_acquire('sub:delay', '1h', 'w');
RESET dlock.default_lock_delay;
SELECT count(*) AS sub_delay_rows FROM dlock.leases WHERE name = 'sub:delay';

DROP FUNCTION session_locks();
