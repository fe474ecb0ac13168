-- dlock without waiting: try_acquire, then release, two transactions.
-- Variables: names (names to pick from), pause_ms (pause before polling
-- again after a refused acquire; see bench_not_granted).
\set k random(1, :names)
SELECT coalesce(l.token, 0) AS token
  FROM (SELECT) one LEFT JOIN dlock.try_acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                                   'client-' || CAST(:client_id AS integer)) l ON true \gset
\if :token = 0
\sleep :pause_ms ms
SELECT bench_not_granted();
\endif
SELECT dlock.release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
