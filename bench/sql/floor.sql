-- Durable floor: two one-row UPDATE transactions per cycle, standing for an
-- acquire and a release that each commit one changed row.
-- Variables: names (rows to pick from; 1 = one hot row).
\set k random(1, :names)
UPDATE bench_floor SET v = v + 1 WHERE id = CAST(:k AS integer);
UPDATE bench_floor SET v = v + 1 WHERE id = CAST(:k AS integer);
