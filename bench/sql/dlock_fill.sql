-- Grants dlock names 'k1' .. 'k<:names>' with a 1 ms ttl, so each gets a row
-- in dlock.lease_state and is free again at once.  A grant holds a lock until
-- its transaction ends, so the grants are committed in batches that fit in
-- the lock table.  Run with psql -v names=N.
SET synchronous_commit = off;
SET bench.names = :'names';
DO $$
DECLARE
  total integer := current_setting('bench.names')::integer;
  batch constant integer := 2000;
BEGIN
  FOR lo IN 1 .. total BY batch LOOP
    PERFORM dlock.try_acquire('k' || g, '1 ms', 'setup')
       FROM generate_series(lo, least(lo + batch - 1, total)) g;
    COMMIT;
  END LOOP;
END
$$;
