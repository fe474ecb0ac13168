-- The guarded-write cycle with dlock and dlock.durable_grants = off: three
-- transactions, try_acquire, one fenced UPDATE of the name's account, and
-- release.  Run with dlock.durable_grants = off and synchronous_commit = off
-- for the session, so that the grant commits without waiting for its flush;
-- the fenced UPDATE's transaction sets synchronous_commit = on for itself
-- (sent as one pipeline, one round trip) and its flush makes the grant,
-- which is earlier in the WAL, durable too: one flush per cycle.
-- Variables: names (names to pick from, at most the number of accounts),
-- pause_ms (pause after a refused acquire; see bench_not_granted).
\set k random(1, :names)
-- a refused try_acquire returns no row, and \aset then leaves token 0
\set token 0
SELECT token
  FROM dlock.try_acquire('k' || CAST(:k AS integer), CAST('10 s' AS interval),
                         'client-' || CAST(:client_id AS integer)) \aset
\if :token = 0
\sleep :pause_ms ms
SELECT bench_not_granted();
\else
\startpipeline
BEGIN;
SET LOCAL synchronous_commit = on;
UPDATE accounts SET balance = balance - 1
 WHERE id = CAST(:k AS integer) AND dlock.fence('k' || CAST(:k AS integer), CAST(:token AS bigint));
COMMIT;
\endpipeline
SELECT dlock.release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
\endif
