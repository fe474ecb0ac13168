-- Raw advisory lock in a transaction: taken by the statement, released by
-- its commit.  No lease, no token, nothing written.
-- Variables: names (keys to pick from; 1 = one hot key).
\set k random(1, :names)
SELECT pg_advisory_xact_lock(CAST(:k AS bigint));
