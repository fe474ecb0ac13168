--
-- Lease rows stay on their pages: many cycles on a few names are HOT
-- updates, pages are pruned as they fill, and the table does not grow.
-- (Another transaction holding an old snapshot meanwhile would keep dead
-- versions from being pruned; the suite's own instance runs no autovacuum.)
--
-- pg_stat_force_next_flush() is new in PostgreSQL 15.  Before, a session
-- sends its statistics at the end of a statement that ends 500 ms
-- (PGSTAT_STAT_INTERVAL) or more after its last report, and a reader takes a
-- statistics file up to 500 ms old: a stand-in that sleeps 0.6 s does both
DO $$
BEGIN
  IF to_regprocedure('pg_catalog.pg_stat_force_next_flush()') IS NULL THEN
    CREATE OR REPLACE FUNCTION public.pg_stat_force_next_flush() RETURNS void
      LANGUAGE sql AS 'SELECT pg_sleep(0.6)';
  END IF;
END
$$;
SELECT count((SELECT token FROM dlock.try_acquire('storage:' || g, '1h', 'w'))) AS granted,
       count(*) FILTER (WHERE dlock.release('storage:' || g, 'w')) AS released
  FROM generate_series(0, 9) g;
CREATE TEMP TABLE size_before AS
  SELECT pg_relation_size('dlock.lease_state') AS heap,
         pg_indexes_size('dlock.lease_state') AS indexes;
SELECT pg_stat_force_next_flush();
CREATE TEMP TABLE updates_before AS
  SELECT n_tup_upd AS upd, n_tup_hot_upd AS hot
    FROM pg_stat_user_tables WHERE relid = 'dlock.lease_state'::regclass;

-- 400 cycles on 10 names, each call its own transaction
SET synchronous_commit = off;
DO $$
BEGIN
  FOR i IN 1 .. 400 LOOP
    PERFORM dlock.try_acquire('storage:' || i % 10, '1h', 'w');
    COMMIT;
    PERFORM dlock.release('storage:' || i % 10, 'w');
    COMMIT;
  END LOOP;
END
$$;
RESET synchronous_commit;

SELECT pg_stat_force_next_flush();
SELECT s.n_tup_upd - b.upd AS updates,
       (s.n_tup_hot_upd - b.hot) >= 0.9 * (s.n_tup_upd - b.upd) AS at_least_90_percent_hot
  FROM pg_stat_user_tables s, updates_before b
 WHERE s.relid = 'dlock.lease_state'::regclass;
SELECT pg_relation_size('dlock.lease_state') - heap <= 2 * current_setting('block_size')::int
         AS heap_grew_at_most_two_pages,
       pg_indexes_size('dlock.lease_state') = indexes AS index_did_not_grow
  FROM size_before;
SELECT count(*) AS names, bool_and(state = 'released') AS all_released
  FROM dlock.leases WHERE name LIKE 'storage:%';

-- The stand-in for pg_stat_force_next_flush() before PostgreSQL 15
DO $$
BEGIN
  IF to_regprocedure('public.pg_stat_force_next_flush()') IS NOT NULL THEN
    DROP FUNCTION public.pg_stat_force_next_flush();
  END IF;
END
$$;
