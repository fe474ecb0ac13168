-- Durable floor of the guarded-write cycle: three one-row UPDATE
-- transactions, standing for an acquire, the guarded write and a release
-- that each commit one changed row.
-- Variables: names (rows to pick from).
\set k random(1, :names)
UPDATE bench_floor SET v = v + 1 WHERE id = CAST(:k AS integer);
UPDATE accounts SET balance = balance - 1 WHERE id = CAST(:k AS integer);
UPDATE bench_floor SET v = v + 1 WHERE id = CAST(:k AS integer);
