-- The guarded-write cycle in one transaction and one round trip (README,
-- "Fewer transactions per cycle"), as in bench/invoice.sh's shape (e): the
-- five statements in one pipeline, nothing read back in between, the
-- UPDATE not fenced (the grant commits with it).
-- Variables: names (names to pick from, at most the number of accounts).
\set k random(1, :names)
\startpipeline
BEGIN;
SELECT token
  FROM dlock.acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                     'client-' || CAST(:client_id AS integer), timeout => CAST('10 s' AS interval));
UPDATE accounts SET balance = balance - 1 WHERE id = CAST(:k AS integer);
SELECT dlock.release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
COMMIT;
\endpipeline
