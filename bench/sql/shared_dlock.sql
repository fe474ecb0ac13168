-- A dlock shared lease of one name ('bench-shared'): acquire with shared =>
-- true (at most 5 s, so that a stuck run fails instead of hanging), then
-- release, two transactions.  Every client holds its own lease, with its own
-- token, alongside the others.
SELECT token
  FROM dlock.acquire('bench-shared', CAST('10 s' AS interval),
                     'client-' || CAST(:client_id AS integer),
                     timeout => CAST('5 s' AS interval), shared => true);
SELECT dlock.release('bench-shared', 'client-' || CAST(:client_id AS integer));
