-- dlock waiting in arrival order: acquire (at most 5 s, so that a stuck run
-- fails instead of hanging), then release, two transactions.
-- Variables: names (names to pick from; 1 = one hot name).
\set k random(1, :names)
SELECT token
  FROM dlock.acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                     'client-' || CAST(:client_id AS integer),
                     timeout => CAST('5 s' AS interval));
SELECT dlock.release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
