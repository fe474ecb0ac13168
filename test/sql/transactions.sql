--
-- Lease changes are transactional: an acquire, renew or release in a
-- transaction that rolls back changes nothing.  Also: savepoints, the fence
-- pin's lifetime, and every isolation level, in one session (races between
-- sessions are in test/specs/).
--

-- A rolled-back grant leaves no lease; its token is never reused
BEGIN;
SELECT token AS rolled_back_token FROM dlock.try_acquire('tx:a', '1h', 'w1') \gset
SELECT state FROM dlock.leases WHERE name = 'tx:a';
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM dlock.leases WHERE name = 'tx:a';
SELECT dlock.fence('tx:a', :rolled_back_token) AS rolled_back_token_valid;
SELECT token > :rolled_back_token AS next_token_larger FROM dlock.try_acquire('tx:a', '1h', 'w1');

-- A rolled-back renew keeps the old expiry
SELECT expires_at AS expiry_before FROM dlock.leases WHERE name = 'tx:a' \gset
BEGIN;
SELECT expires_at > :'expiry_before' AS extended FROM dlock.renew('tx:a', 'w1', '1 day');
ROLLBACK;
SELECT expires_at = :'expiry_before' AS expiry_unchanged FROM dlock.leases WHERE name = 'tx:a';

-- A rolled-back release or force_release leaves the lease live
BEGIN;
SELECT dlock.release('tx:a', 'w1') AS released;
SELECT state FROM dlock.leases WHERE name = 'tx:a';
ROLLBACK;
BEGIN;
SELECT dlock.force_release('tx:a') AS forced;
ROLLBACK;
SELECT state, owner FROM dlock.leases WHERE name = 'tx:a';

-- A rolled-back same-owner re-acquire keeps the old expiry too
BEGIN;
SELECT token IS NOT NULL AS extended FROM dlock.try_acquire('tx:a', '1 day', 'w1');
ROLLBACK;
SELECT expires_at = :'expiry_before' AS expiry_unchanged FROM dlock.leases WHERE name = 'tx:a';

-- Savepoints: a grant rolled back to a savepoint is gone, the rest stays
BEGIN;
SELECT EXISTS (SELECT FROM dlock.try_acquire('tx:b', '1h', 'w1')) AS granted_b;
SAVEPOINT s1;
SELECT EXISTS (SELECT FROM dlock.try_acquire('tx:c', '1h', 'w1')) AS granted_c;
ROLLBACK TO SAVEPOINT s1;
COMMIT;
SELECT name, state FROM dlock.leases WHERE name IN ('tx:b', 'tx:c') ORDER BY name;

-- An error inside a PL/pgSQL block rolls back the grant made in it
DO $$
BEGIN
  BEGIN
    PERFORM dlock.try_acquire('tx:d', '1h', 'w1');
    RAISE EXCEPTION 'job failed';
  EXCEPTION WHEN raise_exception THEN
    RAISE NOTICE 'caught: %', SQLERRM;
  END;
END $$;
SELECT count(*) AS tx_d_rows FROM dlock.leases WHERE name = 'tx:d';

-- The fence pin belongs to the whole transaction: rolling back the savepoint
-- where fence() was called keeps the name's lock until commit
SELECT token AS b_token FROM dlock.leases WHERE name = 'tx:b' \gset
BEGIN;
SAVEPOINT s1;
SELECT dlock.fence('tx:b', :b_token) AS fenced;
ROLLBACK TO SAVEPOINT s1;
SELECT mode, granted FROM dlock.locks WHERE kind = 'name' AND pid = pg_backend_pid();
SELECT dlock.fence('tx:b', :b_token) AS still_fenced;
COMMIT;
SELECT count(*) AS locks_after_commit FROM dlock.locks
 WHERE kind = 'name' AND pid = pg_backend_pid();

-- A change made by the same transaction is seen by its next fence() call
BEGIN;
SELECT dlock.fence('tx:b', :b_token) AS before_release;
SELECT dlock.release('tx:b', 'w1') AS released;
SELECT dlock.fence('tx:b', :b_token) AS after_release;
SELECT token AS b2_token FROM dlock.try_acquire('tx:b', '1h', 'w2') \gset
SELECT dlock.fence('tx:b', :b2_token) AS new_token,
       dlock.fence('tx:b', :b_token) AS old_token;
COMMIT;

-- The expiry comes from the server's clock at the moment of the grant, not
-- from the start of a long transaction
BEGIN;
SELECT pg_sleep(0.3);
SELECT expires_at - clock_timestamp() > '59s' AS expiry_from_grant_time,
       expires_at - now() > '1min 0.25s' AS not_from_now
  FROM dlock.try_acquire('tx:e', '1min', 'w1');
COMMIT;

-- Every isolation level: a full cycle inside one transaction
CREATE TABLE level_tokens (seq serial, level text, step int, token bigint);
BEGIN ISOLATION LEVEL READ COMMITTED;
INSERT INTO level_tokens (level, step, token) SELECT 'read committed', 1, token FROM dlock.try_acquire('tx:lvl', '1h', 'rc');
SELECT dlock.release('tx:lvl', 'rc');
INSERT INTO level_tokens (level, step, token) SELECT 'read committed', 2, token FROM dlock.try_acquire('tx:lvl', '1h', 'rc2');
SELECT dlock.release('tx:lvl', 'rc2');
COMMIT;
BEGIN ISOLATION LEVEL REPEATABLE READ;
INSERT INTO level_tokens (level, step, token) SELECT 'repeatable read', 1, token FROM dlock.try_acquire('tx:lvl', '1h', 'rr');
SELECT dlock.release('tx:lvl', 'rr');
INSERT INTO level_tokens (level, step, token) SELECT 'repeatable read', 2, token FROM dlock.try_acquire('tx:lvl', '1h', 'rr2');
SELECT dlock.release('tx:lvl', 'rr2');
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
INSERT INTO level_tokens (level, step, token) SELECT 'serializable', 1, token FROM dlock.try_acquire('tx:lvl', '1h', 'sr');
SELECT dlock.release('tx:lvl', 'sr');
INSERT INTO level_tokens (level, step, token) SELECT 'serializable', 2, token FROM dlock.try_acquire('tx:lvl', '1h', 'sr2');
SELECT dlock.fence('tx:lvl', (SELECT token FROM level_tokens WHERE level = 'serializable' AND step = 2)) AS fenced;
COMMIT;
SELECT count(*) AS grants, bool_and(token > prev) AS strictly_increasing
  FROM (SELECT token, lag(token, 1, 0::bigint) OVER (ORDER BY seq) AS prev
          FROM level_tokens) t;
DROP TABLE level_tokens;

-- Two-phase commit: a prepared grant holds the name until COMMIT PREPARED
BEGIN;
SELECT EXISTS (SELECT FROM dlock.try_acquire('tx:2pc', '1h', 'w1')) AS granted;
PREPARE TRANSACTION 'dlock_2pc';
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('tx:2pc', '1h', 'w2')) AS refused_while_prepared;
COMMIT PREPARED 'dlock_2pc';
SELECT owner, state FROM dlock.leases WHERE name = 'tx:2pc';

-- A transaction whose only change is a release commits without waiting for
-- its flush (test/t/008_lazy_release.pl shows that); the caller's
-- synchronous_commit is left as it was.
SELECT EXISTS (SELECT FROM dlock.try_acquire('tx:lazy', '1h', 'w')) AS granted;
SELECT dlock.release('tx:lazy', 'w') AS released;
SHOW synchronous_commit;
SET synchronous_commit = remote_apply;
SELECT EXISTS (SELECT FROM dlock.try_acquire('tx:lazy', '1h', 'w')) AS granted;
SELECT dlock.release('tx:lazy', 'w') AS released;
SHOW synchronous_commit;
RESET synchronous_commit;
-- The lazy commit lowers synchronous_commit for its commit record only: a
-- SET LOCAL before it, and the session's setting, come back as they were,
-- also after a rolled-back savepoint and after a prepared release
SELECT EXISTS (SELECT FROM dlock.try_acquire('tx:lazy', '1h', 'w')) AS granted;
BEGIN;
SET LOCAL synchronous_commit = remote_write;
SAVEPOINT s;
SELECT dlock.release('tx:lazy', 'w') AS released;
ROLLBACK TO SAVEPOINT s;
SELECT dlock.release('tx:lazy', 'w') AS released;
SHOW synchronous_commit;
COMMIT;
SHOW synchronous_commit;
SELECT EXISTS (SELECT FROM dlock.try_acquire('tx:lazy', '1h', 'w')) AS granted;
BEGIN;
SELECT dlock.release('tx:lazy', 'w') AS released;
PREPARE TRANSACTION 'dlock_lazy_2pc';
SHOW synchronous_commit;
COMMIT PREPARED 'dlock_lazy_2pc';
SELECT state FROM dlock.leases WHERE name = 'tx:lazy';
SHOW synchronous_commit;

-- The rows of a name that a transaction holds are read once and kept while
-- it holds the name (lease_store.c): every later call of the transaction on
-- the name sees its own latest change, also after a savepoint rolled back
-- a change, after a refused grant and across names
BEGIN;
SELECT token AS held_token FROM dlock.acquire('tx:held', '1h', 'w1') \gset
SELECT expires_at > now() + interval '10 hours' AS renewed FROM dlock.renew('tx:held', 'w1', '20 hours');
SELECT dlock.fence('tx:held', :held_token) AS fences_after_renew;
SELECT count(*) AS refused_other_owner FROM dlock.try_acquire('tx:held', '1h', 'w2');
SAVEPOINT s;
SELECT dlock.release('tx:held', 'w1') AS released_in_savepoint;
SELECT dlock.fence('tx:held', :held_token) AS fences_after_release;
ROLLBACK TO SAVEPOINT s;
SELECT dlock.fence('tx:held', :held_token) AS fences_again;
SELECT token FROM dlock.acquire('tx:held2', '1h', 'w1') \gset held2_
SELECT dlock.release('tx:held', 'w1') AS released_after_rollback_to;
SELECT dlock.release('tx:held', 'w1') AS released_twice;
SELECT dlock.release('tx:held2', 'w1') AS released_other_name;
SELECT token > :held_token AS regranted FROM dlock.acquire('tx:held', '1h', 'w2');
COMMIT;
SELECT owner, state FROM dlock.leases WHERE name IN ('tx:held', 'tx:held2') ORDER BY name;
-- A grant in a savepoint that rolled back: the name goes back to its
-- committed row, which the release then finds
BEGIN;
SAVEPOINT s;
SELECT dlock.release('tx:held', 'w2') AS released_in_savepoint;
SELECT count(*) AS granted_in_savepoint FROM dlock.acquire('tx:held', '1h', 'w3');
ROLLBACK TO SAVEPOINT s;
SELECT dlock.release('tx:held', 'w3') AS w3_holds_nothing;
SELECT dlock.release('tx:held', 'w2') AS w2_released;
COMMIT;
SELECT owner, state FROM dlock.leases WHERE name = 'tx:held';
-- A prepared grant: the rows kept go with the PREPARE (the prepared
-- transaction holds the name now); the next transaction reads the row
BEGIN;
SELECT count(*) AS granted FROM dlock.acquire('tx:held3', '1h', 'w1');
PREPARE TRANSACTION 'dlock_held_2pc';
COMMIT PREPARED 'dlock_held_2pc';
BEGIN;
SELECT dlock.release('tx:held3', 'w1') AS released_after_commit_prepared;
SELECT dlock.release('tx:held3', 'w1') AS released_twice;
COMMIT;
-- A set in one transaction: the rows kept are the last name's; the fence
-- and release_all of both names see the grant
BEGIN;
SELECT min(token) AS set_token FROM dlock.acquire_all(ARRAY['tx:set1', 'tx:set2'], '1h', 'w1') \gset
SELECT dlock.fence('tx:set1', :set_token) AND dlock.fence('tx:set2', :set_token) AS both_fence;
SELECT dlock.release_all(ARRAY['tx:set1', 'tx:set2'], 'w1') AS released;
SELECT dlock.fence('tx:set1', :set_token) OR dlock.fence('tx:set2', :set_token) AS either_fences;
COMMIT;
SELECT name, state FROM dlock.leases WHERE name IN ('tx:set1', 'tx:set2') ORDER BY name;
-- Many renewals of one name in one transaction.  Each rewrites the kept
-- row, whose old strings are freed (lease_store.c, HeldRowsWritten), so the
-- memory of the kept rows (the context "dlock held rows") is what one
-- renewal needs, however many follow: after 10 renewals with a value of
-- 1000 bytes it holds that value, and 190 more add less than one block of
-- it (8 kB), where keeping the old strings would add 190 kB.  The memory is
-- read from pg_backend_memory_contexts, which PostgreSQL 13 does not have:
-- there the bytes are NULL and the bound is not checked.
CREATE FUNCTION pg_temp.held_rows_bytes() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  bytes bigint;
BEGIN
  IF to_regclass('pg_catalog.pg_backend_memory_contexts') IS NULL THEN
    RETURN NULL;
  END IF;
  EXECUTE $q$SELECT sum(total_bytes) FROM pg_catalog.pg_backend_memory_contexts
              WHERE name = 'dlock held rows'$q$ INTO bytes;
  RETURN bytes;
END
$$;
CREATE TEMP TABLE held_rows_bytes (after_renewals int, bytes bigint);
BEGIN;
SELECT count(*) AS granted FROM dlock.acquire('tx:renewals', '1h', 'w1');
SELECT count(*) AS renewed FROM generate_series(1, 10) i,
       LATERAL dlock.renew('tx:renewals', 'w1', (i || ' s')::interval, repeat('v', 1000));
INSERT INTO held_rows_bytes SELECT 10, pg_temp.held_rows_bytes();
SELECT count(*) AS renewed FROM generate_series(11, 200) i,
       LATERAL dlock.renew('tx:renewals', 'w1', (i || ' s')::interval, repeat('v', 1000));
INSERT INTO held_rows_bytes SELECT 200, pg_temp.held_rows_bytes();
SELECT coalesce(a.bytes >= 1000, true) AS kept_rows_hold_the_value,
       coalesce(b.bytes - a.bytes < 8192, true) AS kept_rows_bounded
  FROM held_rows_bytes a, held_rows_bytes b
 WHERE a.after_renewals = 10 AND b.after_renewals = 200;
SELECT expires_at >= now() + interval '200 s' AS last_renewal_counts
  FROM dlock.leases WHERE name = 'tx:renewals';
SELECT dlock.release('tx:renewals', 'w1') AS released;
COMMIT;
DROP TABLE held_rows_bytes;
-- A row deleted by hand (the table owner's own DELETE) in the granting
-- transaction: fence() and release() see it gone, though the grant kept
-- the name's rows and fence() had answered true (both are forgotten at a
-- write that dlock did not make)
BEGIN;
SELECT token AS dml_token FROM dlock.acquire('tx:dml', '1h', 'w1') \gset
SELECT dlock.fence('tx:dml', :dml_token) AS fences_before;
DELETE FROM dlock.lease_state WHERE name = 'tx:dml';
SELECT dlock.fence('tx:dml', :dml_token) AS fences_after_delete;
SELECT dlock.release('tx:dml', 'w1') AS released_after_delete;
COMMIT;
-- and in another transaction, a row updated by hand is read as it is now
SELECT token AS dml_token FROM dlock.try_acquire('tx:dml2', '1h', 'w1') \gset
BEGIN;
SELECT dlock.fence('tx:dml2', :dml_token) AS fences_before;
UPDATE dlock.lease_state SET expires_at = now() - interval '1 s' WHERE name = 'tx:dml2';
SELECT dlock.fence('tx:dml2', :dml_token) AS fences_after_expiry_by_hand;
COMMIT;
SELECT state FROM dlock.leases WHERE name = 'tx:dml2';
