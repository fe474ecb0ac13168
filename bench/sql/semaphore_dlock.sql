-- A permit of a dlock counting semaphore on one name ('bench-semaphore'):
-- acquire with max_holders => :permits, waiting in arrival order (at most
-- 5 s, so that a stuck run fails instead of hanging), then release, two
-- transactions.
-- Variables: permits (the semaphore's size).
SELECT token
  FROM dlock.acquire('bench-semaphore', CAST('10 s' AS interval),
                     'client-' || CAST(:client_id AS integer),
                     timeout => CAST('5 s' AS interval),
                     max_holders => CAST(:permits AS integer));
SELECT dlock.release('bench-semaphore', 'client-' || CAST(:client_id AS integer));
