--
-- Sets of names granted all at once, published values, and dlock.watch(),
-- in one session (the concurrent cases are isolation specs: sets_*.spec and
-- watch.spec).
--

-- a token from before, on one of the names
SELECT token AS before_token FROM dlock.try_acquire('set:b', '1h', 'early') \gset
SELECT dlock.release('set:b', 'early');

--
-- try_acquire_all: every distinct name, one row each, one token for all,
-- larger than every earlier token of each name
--
CREATE TEMP TABLE got AS
  SELECT * FROM dlock.try_acquire_all(ARRAY['set:c', 'set:a', 'set:b', 'set:a'], '1h', 'w1');
SELECT name, owner, expires_at - clock_timestamp() BETWEEN '59min' AND '1h' AS ttl_from_now
  FROM got ORDER BY name COLLATE "C";
SELECT count(DISTINCT token) AS tokens, min(token) > :before_token AS larger FROM got;
SELECT token AS set_token FROM got LIMIT 1 \gset
-- one value fences every name of the set
SELECT dlock.fence('set:a', :set_token) AND dlock.fence('set:b', :set_token)
       AND dlock.fence('set:c', :set_token) AS fenced;
SELECT name, token = :set_token AS set_token, state FROM dlock.leases
 WHERE name LIKE 'set:%' ORDER BY name COLLATE "C";

-- another owner: no rows, nothing changed, no token drawn
CREATE TEMP TABLE before AS SELECT * FROM dlock.lease_state;
SELECT last_value AS counter_before FROM dlock.token_seq \gset
SELECT count(*) AS granted FROM dlock.try_acquire_all(ARRAY['set:z', 'set:a'], '1h', 'w2');
SELECT count(*) AS changed_rows
  FROM ((TABLE before EXCEPT TABLE dlock.lease_state)
        UNION ALL (TABLE dlock.lease_state EXCEPT TABLE before)) d;
SELECT last_value = :counter_before AS counter_unchanged FROM dlock.token_seq;
SELECT count(*) AS rows_of_z FROM dlock.lease_state WHERE name = 'set:z';

-- the same owner asking again for the same set: same token, new expiry
SELECT name, token = :set_token AS same_token,
       expires_at - clock_timestamp() BETWEEN '1h59min' AND '2h' AS extended
  FROM dlock.try_acquire_all(ARRAY['set:a', 'set:b', 'set:c'], '2h', 'w1') ORDER BY name COLLATE "C";
-- the same owner with a different set: a new token for all of it; the
-- names it held move to the new token, and the old one fences false
SELECT count(*) AS granted, count(DISTINCT token) AS tokens, min(token) > :set_token AS larger
  FROM dlock.try_acquire_all(ARRAY['set:a', 'set:d'], '1h', 'w1');
SELECT dlock.fence('set:a', :set_token) AS old_token_on_a,
       dlock.fence('set:b', :set_token) AS old_token_on_b;

-- a name in its lock-delay keeps the whole set from being granted
SELECT token AS delayed_token FROM dlock.try_acquire('set:delayed', '1h', 'w3', lock_delay => '1h') \gset
SELECT dlock.force_release('set:delayed');
SELECT count(*) AS granted FROM dlock.try_acquire_all(ARRAY['set:e', 'set:delayed'], '1h', 'w3');
SELECT count(*) AS rows_of_e FROM dlock.lease_state WHERE name = 'set:e';

--
-- acquire_all: not waiting (timeout 0) it refuses with 55P03, holding none
--
\set VERBOSITY default
SELECT * FROM dlock.acquire_all(ARRAY['set:f', 'set:a'], '1h', 'w2', '0');
SELECT * FROM dlock.acquire_all(ARRAY['set:f', 'set:delayed'], '1h', 'w2', '10ms');
\set VERBOSITY terse
SELECT count(*) AS rows_of_f FROM dlock.lease_state WHERE name = 'set:f';
-- caught in PL/pgSQL, the failure leaves nothing behind either
DO $$
BEGIN
  PERFORM dlock.acquire_all(ARRAY['set:g', 'set:a'], '1h', 'w2', '50ms');
EXCEPTION WHEN lock_not_available THEN
  RAISE NOTICE 'caught %', SQLSTATE;
END $$;
SELECT count(*) AS rows_of_g FROM dlock.lease_state WHERE name = 'set:g';
SELECT count(*) AS dlock_locks_left FROM dlock.locks WHERE pid = pg_backend_pid();
-- free names: granted at once
SELECT count(*) AS granted, count(DISTINCT token) AS tokens
  FROM dlock.acquire_all(ARRAY['set:h1', 'set:h2'], '1h', 'w2', '1s');

-- a set granted in a transaction that rolls back, or in a savepoint rolled
-- back, leaves nothing
BEGIN;
SELECT count(*) AS granted FROM dlock.try_acquire_all(ARRAY['set:r1', 'set:r2'], '1h', 'w4');
SAVEPOINT s;
SELECT count(*) AS granted FROM dlock.try_acquire_all(ARRAY['set:r3', 'set:r4'], '1h', 'w4');
ROLLBACK TO s;
COMMIT;
SELECT name FROM dlock.leases WHERE name LIKE 'set:r%' ORDER BY name COLLATE "C";

--
-- release_all: how many of the names the owner held live
--
SELECT dlock.release_all(ARRAY['set:a', 'set:b', 'set:c', 'set:d', 'set:nothing', 'set:a'], 'w1')
       AS released;
SELECT dlock.release_all(ARRAY['set:h1', 'set:h2'], 'not-the-owner') AS released;
SELECT dlock.release_all(ARRAY['set:h1', 'set:h2', 'set:r1', 'set:r2'], 'w2') AS released;
SELECT name, state FROM dlock.leases WHERE name IN ('set:a', 'set:d', 'set:h1', 'set:r1')
 ORDER BY name COLLATE "C";

--
-- value: published by the holder, kept by the same owner asking again
-- without one and by renew without one, replaced by renew with one (same
-- token), and NULL again at the next grant
--
SELECT token AS v_token FROM dlock.try_acquire('set:leader', '1h', 'n1', value => 'n1:5432') \gset
SELECT value FROM dlock.leases WHERE name = 'set:leader';
SELECT token = :v_token AS same_token FROM dlock.try_acquire('set:leader', '1h', 'n1');
SELECT value FROM dlock.leases WHERE name = 'set:leader';
SELECT token = :v_token AS same_token FROM dlock.renew('set:leader', 'n1', '1h', 'n1:6432');
SELECT value FROM dlock.leases WHERE name = 'set:leader';
SELECT token = :v_token AS same_token FROM dlock.renew('set:leader', 'n1', '1h');
SELECT value FROM dlock.leases WHERE name = 'set:leader';
SELECT dlock.renew('set:leader', 'n2', '1h', 'n2:5432') IS NULL AS not_the_holder;
SELECT value FROM dlock.leases WHERE name = 'set:leader';
SELECT dlock.release('set:leader', 'n1');
SELECT state, value FROM dlock.leases WHERE name = 'set:leader';
SELECT token > :v_token AS new_token FROM dlock.acquire('set:leader', '1h', 'n2', '0');
SELECT value IS NULL AS no_value FROM dlock.leases WHERE name = 'set:leader';

--
-- watch: returns at once when the live token differs from the one given,
-- the given token when the timeout passes
--
SELECT token AS w_token FROM dlock.leases WHERE name = 'set:leader' \gset
SELECT dlock.watch('set:leader', NULL) = :w_token AS live_token;
SELECT dlock.watch('set:leader', 1) = :w_token AS live_token;
SELECT dlock.watch('set:never-granted', 1) IS NULL AS none_live;
-- a timeout of 100 years or more never passes (292,000 years: it does not overflow)
SELECT dlock.watch('set:never-granted', 1, '106751991 days') IS NULL AS none_live_long_timeout;
SELECT dlock.watch('set:never-granted', NULL, '0') IS NULL AS timed_out_null;
SELECT dlock.watch('set:leader', :w_token, '0') = :w_token AS timed_out_same;
SELECT clock_timestamp() AS t0 \gset
SELECT dlock.watch('set:leader', :w_token, '200ms') = :w_token AS timed_out_same;
SELECT clock_timestamp() - :'t0' BETWEEN '200ms' AND '2s' AS waited_for_the_timeout;
-- the expiry of the live lease, on the server's clock, ends the watch
SELECT token AS x_token FROM dlock.try_acquire('set:expiring', '300ms', 'n3') \gset
SELECT clock_timestamp() AS t0 \gset
SELECT dlock.watch('set:expiring', :x_token, '30s') IS NULL AS expired;
SELECT clock_timestamp() - :'t0' BETWEEN '250ms' AND '2s' AS at_the_expiry;
-- nothing is left behind
SELECT count(*) AS dlock_locks_left FROM dlock.locks WHERE pid = pg_backend_pid();
-- a watch cancelled in a savepoint leaves nothing in the transaction
BEGIN;
SAVEPOINT s;
SET LOCAL statement_timeout = '100ms';
SELECT dlock.watch('set:leader', :w_token);
ROLLBACK TO s;
SELECT count(*) AS dlock_locks_left FROM dlock.locks WHERE pid = pg_backend_pid();
COMMIT;

DELETE FROM dlock.lease_state WHERE name LIKE 'set:%';
