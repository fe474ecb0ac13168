-- One acquire + release cycle of a single hot name (pgbench script; no colon
-- in the name: pgbench would take it for a variable)
SELECT token FROM dlock.acquire('bench-hot', '10s', 'client-' || CAST(:client_id AS integer)) \gset
SELECT dlock.release('bench-hot', 'client-' || CAST(:client_id AS integer));
