-- dlock_try.sql with try_acquire called in the scalar form: the token is
-- taken from the result with (...).token, so the plan has no function-scan
-- node (bench/instructions.sh compares the two forms).
\set k random(1, :names)
SELECT coalesce((dlock.try_acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                                  'client-' || CAST(:client_id AS integer))).token, 0) AS token \gset
\if :token = 0
\sleep :pause_ms ms
SELECT bench_not_granted();
\endif
SELECT dlock.release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
