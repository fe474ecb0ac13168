--
-- Bad input: a clear error with the right SQLSTATE, nothing changed, the
-- backend alive.  Each call runs through a helper that reports SQLSTATE and
-- message; afterwards the lease table and the token counter (which is not
-- transactional, so an error after a token was drawn would show) must be as
-- they were.
--

CREATE FUNCTION pg_temp.outcome(call text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE 'SELECT ' || call;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

SELECT EXISTS (SELECT FROM dlock.try_acquire('err:held', '1h', 'holder')) AS granted;

CREATE TEMP TABLE state_before AS SELECT * FROM dlock.lease_state;
SELECT last_value AS counter_before FROM dlock.token_seq \gset

SELECT call, pg_temp.outcome(call) FROM (VALUES
  -- NULL where a value is required: 22004
  ($$dlock.try_acquire(NULL, '1s')$$),
  ($$dlock.try_acquire('n', NULL)$$),
  ($$dlock.acquire(NULL, '1s')$$),
  ($$dlock.acquire('n', NULL)$$),
  ($$dlock.renew(NULL, 'o', '1s')$$),
  ($$dlock.renew('n', NULL, '1s')$$),
  ($$dlock.renew('n', 'o', NULL)$$),
  ($$dlock.release(NULL, 'o')$$),
  ($$dlock.release('n', NULL)$$),
  ($$dlock.force_release(NULL)$$),
  ($$dlock.fence(NULL, 1)$$),
  ($$dlock.fence('n', NULL)$$),
  -- empty or over-long names: 22023
  ($$dlock.try_acquire('', '1s')$$),
  ($$dlock.acquire('', '1s')$$),
  ($$dlock.renew('', 'o', '1s')$$),
  ($$dlock.release('', 'o')$$),
  ($$dlock.force_release('')$$),
  ($$dlock.fence('', 1)$$),
  ($$dlock.try_acquire(repeat('x', 1025), '1s')$$),
  ($$dlock.try_acquire(repeat('é', 513), '1s')$$),
  ($$dlock.fence(repeat('x', 1025), 1)$$),
  ($$dlock.release(repeat('x', 100000), 'o')$$),
  -- empty or over-long owners: 22023
  ($$dlock.try_acquire('n', '1s', '')$$),
  ($$dlock.acquire('n', '1s', repeat('o', 257))$$),
  ($$dlock.renew('n', '', '1s')$$),
  ($$dlock.release('n', repeat('o', 257))$$),
  -- ttl: not positive, with months, over dlock.max_ttl, huge: 22023
  ($$dlock.try_acquire('n', '0')$$),
  ($$dlock.try_acquire('n', '-1s')$$),
  ($$dlock.try_acquire('n', '1 day -24 hours')$$),
  ($$dlock.try_acquire('n', '-100000000 days')$$),
  ($$dlock.try_acquire('n', '1 mon')$$),
  ($$dlock.try_acquire('n', '1 year')$$),
  ($$dlock.try_acquire('n', '1 mon -30 days')$$),
  ($$dlock.acquire('n', '1 day 1 second')$$),
  ($$dlock.acquire('n', '100000000 days')$$),
  ($$dlock.acquire('n', interval '2147483647 days' + interval '1 hour' * 2562047788)$$),
  ($$dlock.renew('err:held', 'holder', '0')$$),
  ($$dlock.renew('err:held', 'holder', '1 mon')$$),
  ($$dlock.renew('err:held', 'holder', '2 days')$$),
  -- timeout: negative or with months: 22023
  ($$dlock.acquire('n', '1s', 'o', '-1ms')$$),
  ($$dlock.acquire('n', '1s', 'o', '-100000000 days')$$),
  ($$dlock.acquire('n', '1s', 'o', '1 mon')$$),
  -- sets: NULL array or element 22004; empty, too many, bad names,
  -- more than one dimension 22023; and the usual checks of ttl, owner
  -- and timeout
  ($$dlock.try_acquire_all(NULL, '1s')$$),
  ($$dlock.try_acquire_all(ARRAY['a', NULL], '1s')$$),
  ($$dlock.acquire_all(ARRAY[NULL::text], '1s')$$),
  ($$dlock.release_all(NULL, 'o')$$),
  ($$dlock.release_all(ARRAY['a', NULL], 'o')$$),
  ($$dlock.release_all(ARRAY['a'], NULL)$$),
  ($$dlock.try_acquire_all('{}', '1s')$$),
  ($$dlock.acquire_all('{}', '1s')$$),
  ($$dlock.release_all('{}', 'o')$$),
  ($$dlock.try_acquire_all(ARRAY['a', ''], '1s')$$),
  ($$dlock.try_acquire_all(ARRAY['a', repeat('x', 1025)], '1s')$$),
  ($$dlock.try_acquire_all(ARRAY[['a', 'b'], ['c', 'd']], '1s')$$),
  ($$dlock.try_acquire_all(ARRAY(SELECT 'n' || i FROM generate_series(1, 65) i), '1s')$$),
  ($$dlock.acquire_all(ARRAY(SELECT 'n' || i FROM generate_series(1, 65) i), '1s')$$),
  ($$dlock.try_acquire_all(ARRAY['a'], NULL)$$),
  ($$dlock.try_acquire_all(ARRAY['a'], '0')$$),
  ($$dlock.try_acquire_all(ARRAY['a'], '2 days')$$),
  ($$dlock.try_acquire_all(ARRAY['a'], '1s', '')$$),
  ($$dlock.acquire_all(ARRAY['a'], '1s', 'o', '-1s')$$),
  -- values: over 1024 bytes 22023
  ($$dlock.try_acquire('n', '1s', value => repeat('v', 1025))$$),
  ($$dlock.acquire('n', '1s', value => repeat('é', 513))$$),
  ($$dlock.renew('err:held', 'holder', '1s', repeat('v', 1025))$$),
  -- queue: NULL 22004; without dlock in shared_preload_libraries 55000
  ($$dlock.try_acquire('n', '1s', queue => NULL)$$),
  ($$dlock.try_acquire('n', '1s', queue => true)$$),
  -- watch: NULL or bad name 22004/22023, bad timeout 22023
  ($$dlock.watch(NULL, 1)$$),
  ($$dlock.watch('', 1)$$),
  ($$dlock.watch('n', 1, '-1s')$$),
  ($$dlock.watch('n', 1, '1 mon')$$)
) AS bad(call);

-- Nothing changed, and no token was drawn
SELECT count(*) AS changed_rows
  FROM ((TABLE state_before EXCEPT TABLE dlock.lease_state)
        UNION ALL (TABLE dlock.lease_state EXCEPT TABLE state_before)) d;
SELECT last_value = :counter_before AS counter_unchanged FROM dlock.token_seq;

-- Messages as a user sees them, with detail and hint
\set VERBOSITY default
SELECT dlock.try_acquire('n', '2 days');
SELECT dlock.try_acquire('n', '1 mon');
SELECT dlock.try_acquire(repeat('x', 2000), '1s');
SELECT dlock.try_acquire('n', '1s', '');
-- release and renew have no owner to generate: the hint says what to pass
SELECT dlock.release('n', '');
SELECT dlock.renew('n', '', '1s');
SELECT dlock.acquire('n', '1s', 'o', '-1s');
SELECT dlock.acquire('n', NULL);
SELECT dlock.try_acquire_all(ARRAY(SELECT 'n' || i FROM generate_series(1, 65) i), '1s');
SELECT dlock.try_acquire_all(ARRAY['a', NULL, 'c'], '1s');
SELECT dlock.try_acquire('n', '1s', value => repeat('v', 2000));
SELECT dlock.try_acquire('n', '1s', queue => true);
-- a DBA turns session-bound leases off (for roles behind a transaction pooler)
SET dlock.allow_session_bound = off;
SELECT dlock.try_acquire('n', '1s', session_bound => true);
SELECT dlock.acquire('n', '1s', session_bound => true);
SELECT EXISTS (SELECT FROM dlock.try_acquire('err:not-bound', '1s')) AS other_leases_granted;
RESET dlock.allow_session_bound;

-- The limits themselves are accepted
SELECT length(name) AS name_bytes FROM dlock.try_acquire(repeat('x', 1024), '1s', repeat('o', 256));
SELECT octet_length(name) AS name_bytes FROM dlock.try_acquire(repeat('é', 512), '1s');
-- a name given twice counts once: 200 elements naming 64 names are a set of 64
SELECT count(*) AS set_of_64 FROM dlock.try_acquire_all(
  ARRAY(SELECT 'err:set' || (i % 64) FROM generate_series(1, 200) i), '1s');
SELECT EXISTS (SELECT FROM dlock.try_acquire('err:value', '1s', value => repeat('v', 1024))) AS value_accepted;
SELECT octet_length(value) AS value_bytes FROM dlock.leases WHERE name = 'err:value';
SELECT EXISTS (SELECT FROM dlock.try_acquire('err:empty-value', '1s', value => '')) AS empty_value_accepted;
SELECT value = '' AS empty_value_kept FROM dlock.leases WHERE name = 'err:empty-value';
SELECT EXISTS (SELECT FROM dlock.try_acquire('err:max', '1 day')) AS max_ttl_accepted;
-- a timeout too long to represent just means no limit (the largest
-- interval is written as a sum: PostgreSQL 13 reads no more than 2^31 - 1
-- hours in a literal)
SELECT dlock.acquire('err:huge', '1s', 'o', '100000000 days') IS NOT NULL AS granted;
SELECT dlock.acquire('err:huge2', '1s', 'o',
                     interval '2147483647 days' + interval '1 hour' * 2562047788) IS NOT NULL AS granted;
-- the expiry is exactly ttl after the grant, a day counting 24 hours
SELECT EXISTS (SELECT FROM dlock.try_acquire('err:day', '1 day')) AS granted;
-- (extract() gives a double precision before PostgreSQL 14, a numeric since)
SELECT extract(epoch FROM expires_at - acquired_at)::numeric(12, 6) AS ttl_seconds
  FROM dlock.leases WHERE name = 'err:day';

-- dlock.max_ttl bounds the ttl; only superusers may change it
SET dlock.max_ttl = '1min';
SHOW dlock.max_ttl;
SELECT pg_temp.outcome($$dlock.try_acquire('n', '61s')$$);
SELECT EXISTS (SELECT FROM dlock.try_acquire('err:60s', '60s')) AS granted;
RESET dlock.max_ttl;
SELECT pg_temp.outcome($$dlock.try_acquire('n', '0.5s')$$) AS fractional_seconds;

-- dlock.lazy_release: a boolean, on by default, that any role may set
SHOW dlock.lazy_release;
SET dlock.lazy_release = 'sometimes';
SET dlock.lazy_release = off;
SHOW dlock.lazy_release;
RESET dlock.lazy_release;

-- dlock.durable_grants: a boolean, on by default, that any role may set
SHOW dlock.durable_grants;
SET dlock.durable_grants = 'sometimes';
SET dlock.durable_grants = off;
SHOW dlock.durable_grants;
RESET dlock.durable_grants;

-- Release and renew of a name never acquired: false and NULL, no error
SELECT dlock.release('never:seen', 'o') AS released,
       dlock.renew('never:seen', 'o', '1s') IS NULL AS renewed_null,
       dlock.force_release('never:seen') AS forced,
       dlock.fence('never:seen', 0) AS fenced;

-- Read-only transactions cannot change leases (25006); fence and the view work
BEGIN READ ONLY;
SELECT pg_temp.outcome($$dlock.try_acquire('n', '1s')$$);
SELECT pg_temp.outcome($$dlock.acquire('n', '1s')$$);
SELECT pg_temp.outcome($$dlock.renew('err:held', 'holder', '1s')$$);
SELECT pg_temp.outcome($$dlock.release('err:held', 'holder')$$);
SELECT pg_temp.outcome($$dlock.force_release('err:held')$$);
SELECT pg_temp.outcome($$dlock.fence('err:held', 1)$$);
SELECT count(*) FROM dlock.leases WHERE name = 'err:held';
COMMIT;

-- The backend is alive and the held lease is untouched
SELECT name, owner, state FROM dlock.leases WHERE name = 'err:held';
