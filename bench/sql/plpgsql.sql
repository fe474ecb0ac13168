-- The hand-written PL/pgSQL lease (bench/plpgsql_lease.sql): acquire with a
-- token, then compare-and-release, two transactions.
-- Variables: names (names to pick from; 1 = one hot name), pause_ms (pause
-- before polling again after a refused acquire; see bench_not_granted).
\set k random(1, :names)
SELECT coalesce(plpgsql_acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                                'client-' || CAST(:client_id AS integer)), 0) AS token \gset
\if :token = 0
\sleep :pause_ms ms
SELECT bench_not_granted();
\endif
SELECT plpgsql_release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
