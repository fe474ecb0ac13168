-- ShedLock-style lock on PostgreSQL, using the database's clock: acquire is
-- one upsert that takes the row only when its lock_until has passed; it
-- succeeded iff a row was affected.  Release moves lock_until to now.
-- Variables: names (names to pick from; 1 = one hot name), pause_ms (pause
-- before polling again after a refused acquire; see bench_not_granted).
\set k random(1, :names)
WITH taken AS (
  INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
  VALUES ('k' || CAST(:k AS integer), now() + CAST('10 s' AS interval), now(),
          'client-' || CAST(:client_id AS integer))
  ON CONFLICT (name) DO UPDATE
     SET lock_until = EXCLUDED.lock_until,
         locked_at = EXCLUDED.locked_at,
         locked_by = EXCLUDED.locked_by
   WHERE shedlock.lock_until <= now()
  RETURNING 1)
SELECT count(*) AS granted FROM taken \gset
\if :granted = 0
\sleep :pause_ms ms
SELECT bench_not_granted();
\endif
UPDATE shedlock SET lock_until = now()
 WHERE name = 'k' || CAST(:k AS integer) AND locked_by = 'client-' || CAST(:client_id AS integer);
