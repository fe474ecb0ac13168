-- The guarded-write cycle with dlock, durable grants (the default): three
-- transactions, try_acquire, one fenced UPDATE of the name's account, and
-- release.  Run with synchronous_commit = on: the grant and the write are
-- flushed, the release (a release-only transaction) is not waited for.
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
UPDATE accounts SET balance = balance - 1
 WHERE id = CAST(:k AS integer) AND dlock.fence('k' || CAST(:k AS integer), CAST(:token AS bigint));
SELECT dlock.release('k' || CAST(:k AS integer), 'client-' || CAST(:client_id AS integer));
\endif
