-- Raw shared advisory lock in a transaction, on one key (the one the writer
-- of bench/compare.sh's section kinds locks exclusively): taken by the
-- statement, released by its commit, one round trip.  No lease, no token,
-- nothing written.
SELECT pg_advisory_xact_lock_shared(CAST(1 AS bigint));
