-- Raw session advisory lock: lock, then unlock, two round trips.  No lease,
-- no token, nothing written.
-- Variables: names (keys to pick from; 1 = one hot key).
\set k random(1, :names)
SELECT pg_advisory_lock(CAST(:k AS bigint));
SELECT pg_advisory_unlock(CAST(:k AS bigint));
