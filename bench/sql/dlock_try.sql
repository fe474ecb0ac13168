-- dlock without waiting: try_acquire, then release, two transactions.
-- Variables: names (names to pick from), pause_ms (pause before polling
-- again after a refused acquire; see bench_not_granted).
\set k random(1, :names)
-- a refused try_acquire returns no row, and \aset then leaves token 0
\set token 0
SELECT token
  FROM dlock.try_acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                         'client-' || CAST(:client_id AS integer)) \aset
\if :token = 0
\sleep :pause_ms ms
SELECT bench_not_granted();
\endif
SELECT dlock.release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
