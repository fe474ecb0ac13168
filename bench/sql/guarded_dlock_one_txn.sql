-- The guarded-write cycle in one transaction (README, "Fewer transactions
-- per cycle"), as in bench/invoice.sh's shape (d): acquire, the token read
-- back, one fenced UPDATE of the name's account, release, one commit.
-- Variables: names (names to pick from, at most the number of accounts).
\set k random(1, :names)
BEGIN;
SELECT token
  FROM dlock.acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                     'client-' || CAST(:client_id AS integer), timeout => CAST('10 s' AS interval)) \gset
UPDATE accounts SET balance = balance - 1
 WHERE id = CAST(:k AS integer) AND dlock.fence('k' || CAST(:k AS integer), CAST(:token AS bigint));
SELECT dlock.release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
COMMIT;
