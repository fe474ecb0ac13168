-- The guarded-write cycle with the hand-written PL/pgSQL lease
-- (bench/plpgsql_lease.sql): three transactions, acquire with a token, one
-- UPDATE of the name's account that checks the token in its WHERE clause,
-- and compare-and-release.
-- Variables: names (names to pick from, at most the number of accounts),
-- pause_ms (pause after a refused acquire; see bench_not_granted).
\set k random(1, :names)
SELECT coalesce(plpgsql_acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                                'client-' || CAST(:client_id AS integer)), 0) AS token \gset
\if :token = 0
\sleep :pause_ms ms
SELECT bench_not_granted();
\else
UPDATE accounts SET balance = balance - 1
 WHERE id = CAST(:k AS integer)
   AND EXISTS (SELECT FROM plpgsql_lease
                WHERE name = 'k' || CAST(:k AS integer) AND token = CAST(:token AS bigint)
                  AND expires_at > clock_timestamp() FOR SHARE);
SELECT plpgsql_release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
\endif
