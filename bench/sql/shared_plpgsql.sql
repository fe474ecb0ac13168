-- The hand-written PL/pgSQL shared lease (bench/plpgsql_lease.sql) of one
-- name ('bench-shared'): acquire with a token, then compare-and-release, two
-- transactions.  Refused only while a writer holds the name.
-- Variables: pause_ms (pause before polling again after a refused acquire;
-- see bench_not_granted).
SELECT coalesce(plpgsql_acquire_shared('bench-shared', CAST('10 s' AS interval),
                                       'client-' || CAST(:client_id AS integer)), 0) AS token \gset
\if :token = 0
\sleep :pause_ms ms
SELECT bench_not_granted();
\endif
SELECT plpgsql_release_shared('bench-shared', 'client-' || CAST(:client_id AS integer));
