-- dlock_try.sql with try_acquire called in a scalar subquery, which is one
-- row whether the call grants (a token) or refuses (NULL, since a refusal
-- is no row); bench/instructions.sh compares the two forms.
\set k random(1, :names)
SELECT coalesce((SELECT token FROM dlock.try_acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                                                    'client-' || CAST(:client_id AS integer))), 0) AS token \gset
\if :token = 0
\sleep :pause_ms ms
SELECT bench_not_granted();
\endif
SELECT dlock.release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
