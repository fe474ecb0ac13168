--
-- The arguments of issue "waiting done well", in one session: lock_delay,
-- session_bound, dlock.default_lock_delay, their bad input, and the locks a
-- session-bound lease holds.
--

CREATE FUNCTION pg_temp.outcome(call text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE 'SELECT ' || call;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

CREATE VIEW my_dlock_locks AS
SELECT kind AS space, mode, granted FROM dlock.locks WHERE pid = pg_backend_pid();

SELECT last_value AS counter_before FROM dlock.token_seq \gset

-- Bad input: 22023 for lock_delay, 22004 for a NULL session_bound
SELECT call, pg_temp.outcome(call) FROM (VALUES
  ($$dlock.try_acquire('w:bad', '1s', 'o', lock_delay => '-1ms')$$),
  ($$dlock.acquire('w:bad', '1s', 'o', lock_delay => '-1ms')$$),
  ($$dlock.acquire('w:bad', '1s', 'o', lock_delay => '1 mon')$$),
  ($$dlock.acquire('w:bad', '1s', 'o', lock_delay => '2 days')$$),
  ($$dlock.acquire('w:bad', '1s', 'o', lock_delay => '-100000000 days')$$),
  ($$dlock.try_acquire('w:bad', '1s', 'o', session_bound => NULL)$$),
  ($$dlock.acquire('w:bad', '1s', 'o', session_bound => NULL)$$)
) AS bad(call);
SELECT last_value = :counter_before AS counter_unchanged FROM dlock.token_seq;
SELECT count(*) AS rows_for_bad_calls FROM dlock.lease_state WHERE name = 'w:bad';
-- PostgreSQL's message for a value out of range, without the units that 17
-- adds to the bounds
DO $$
BEGIN
  SET dlock.default_lock_delay = '-1';
  RAISE 'dlock.default_lock_delay = -1 was accepted';
EXCEPTION WHEN invalid_parameter_value THEN
  RAISE NOTICE '%', replace(replace(SQLERRM, ' ms .. ', ' .. '), ' ms)', ')');
END $$;
SET dlock.default_lock_delay = '1s';
SHOW dlock.default_lock_delay;
RESET dlock.default_lock_delay;

--
-- lock_delay
--
-- after force_release: the name is refused until the delay has passed
SELECT owner FROM dlock.try_acquire('w:ld', '1h', 'a', lock_delay => '300ms');
SELECT dlock.force_release('w:ld');
SELECT state, lock_delay, grantable_at = ended_at + lock_delay AS grantable_after_delay
  FROM dlock.leases WHERE name = 'w:ld';
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('w:ld', '1h', 'b')) AS refused_in_delay;
\set VERBOSITY default
SELECT dlock.acquire('w:ld', '1h', 'b', timeout => '0');
\set VERBOSITY terse
SELECT pg_sleep(0.35);
SELECT owner FROM dlock.try_acquire('w:ld', '1h', 'b');
-- after release by the owner: no delay
SELECT dlock.release('w:ld', 'b');
SELECT owner FROM dlock.try_acquire('w:ld', '1h', 'c', lock_delay => '1h');
SELECT dlock.release('w:ld', 'c');
SELECT owner FROM dlock.try_acquire('w:ld', '1h', 'd');
-- after expiry: the delay of the expired grant applies
SELECT owner FROM dlock.try_acquire('w:exp', '100ms', 'a', lock_delay => '300ms');
SELECT pg_sleep(0.15);
SELECT state, grantable_at = expires_at + lock_delay AS grantable_after_delay
  FROM dlock.leases WHERE name = 'w:exp';
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('w:exp', '1h', 'b')) AS refused_in_delay;
SELECT owner FROM dlock.acquire('w:exp', '1h', 'b', timeout => '5s');
-- dlock.default_lock_delay applies to grants that give none
SET dlock.default_lock_delay = '250ms';
SELECT owner FROM dlock.try_acquire('w:def', '1h', 'a');
RESET dlock.default_lock_delay;
SELECT lock_delay FROM dlock.leases WHERE name = 'w:def';
SELECT owner FROM dlock.try_acquire('w:zero', '1h', 'a', lock_delay => '0');
SELECT dlock.force_release('w:zero');
SELECT owner FROM dlock.try_acquire('w:zero', '1h', 'b');

--
-- session_bound
--
SELECT owner FROM dlock.try_acquire('w:sb', '1h', 'a', session_bound => true);
SELECT state, session_bound, holder_pid = pg_backend_pid() AS mine, grantable_at = expires_at AS grantable_at_expiry
  FROM dlock.leases WHERE name = 'w:sb';
-- the session lock is held at session level, after the grant committed
SELECT * FROM my_dlock_locks;
-- releasing gives it back
SELECT dlock.release('w:sb', 'a');
SELECT count(*) AS session_locks FROM my_dlock_locks;
-- a rolled-back session-bound grant leaves no lock behind
BEGIN;
SELECT owner FROM dlock.try_acquire('w:sb', '1h', 'a', session_bound => true);
ROLLBACK;
SELECT count(*) AS session_locks FROM my_dlock_locks;
-- expired session-bound leases give their lock back at the next grant
SELECT owner FROM dlock.try_acquire('w:sb1', '50ms', 'a', session_bound => true);
SELECT pg_sleep(0.1);
SELECT owner FROM dlock.try_acquire('w:sb2', '1h', 'a', session_bound => true);
SELECT count(*) AS session_locks FROM my_dlock_locks;
-- an expired session-bound lease keeps its lock-delay, also after this
-- backend's next session-bound grant
SELECT owner FROM dlock.try_acquire('w:sbd', '50ms', 'a', lock_delay => '1h', session_bound => true);
SELECT pg_sleep(0.1);
SELECT owner FROM dlock.try_acquire('w:sbd2', '1h', 'a', session_bound => true);
SELECT state, grantable_at = expires_at + lock_delay AS delay_kept FROM dlock.leases WHERE name = 'w:sbd';
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('w:sbd', '1h', 'b')) AS refused_in_delay;
SELECT dlock.release('w:sbd2', 'a');
-- fence sees a live session-bound lease
SELECT dlock.fence('w:sb2', token) AS fenced FROM dlock.leases WHERE name = 'w:sb2';
-- DISCARD ALL drops session-level advisory locks: it ends the lease
DISCARD ALL;
SELECT state, grantable_at IS NULL AS grantable_now FROM dlock.leases WHERE name = 'w:sb2';
SELECT dlock.fence('w:sb2', token) AS fenced FROM dlock.leases WHERE name = 'w:sb2';
SELECT owner FROM dlock.try_acquire('w:sb2', '1h', 'b');

-- No dlock lock is left behind by all of the above
SELECT count(*) AS leftover_locks FROM my_dlock_locks;
DROP VIEW my_dlock_locks;
