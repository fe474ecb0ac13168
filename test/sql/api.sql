--
-- Every function of dlock, in one session: grants, the same owner asking
-- again, renew, release, force_release, expiry, waiting, fence and the view.
--

-- The objects the extension installs (docs/reference.md lists them).
-- From PostgreSQL 17 on, the row types of its tables and views and the array
-- types are recorded as members too: they come with their owners and are
-- left out, so that the list is the same on every major
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS "Object description"
FROM pg_depend d
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dlock')
  AND d.deptype = 'e'
  AND NOT (d.classid = 'pg_type'::regclass AND EXISTS (
        SELECT FROM pg_type t
        WHERE t.oid = d.objid
          AND (EXISTS (SELECT FROM pg_type e WHERE e.typarray = t.oid)
               OR EXISTS (SELECT FROM pg_class c
                          WHERE c.oid = t.typrelid AND c.relkind <> 'c'))))
ORDER BY 1;

-- Tokens follow the server's clock: the first grant of each incarnation of
-- the database (the first since CREATE EXTENSION, a restart, a promotion or
-- a restore) moves the counter up to it (docs/internals.md, I1), so their
-- values differ from run to run.  A warm-up grant of a name of its own makes
-- that move; tokens below are shown relative to the counter after it (t0),
-- as the small numbers a counter starting at 1 would have given.
SELECT dlock.release('tokens:warm-up', 'w') FROM dlock.try_acquire('tokens:warm-up', '1h', 'w');
SELECT last_value AS t0 FROM dlock.token_seq \gset

-- A log of every token granted below, to check that tokens only grow
CREATE TABLE granted (seq serial, name text, token bigint);
CREATE FUNCTION log_grant(l dlock.lease) RETURNS dlock.lease
LANGUAGE sql AS $$ INSERT INTO granted (name, token) SELECT l.name, l.token WHERE l.token IS NOT NULL; SELECT l $$;

--
-- try_acquire
--
SELECT name, owner, token - :t0 AS token, expires_at - clock_timestamp() BETWEEN '9s' AND '10s' AS ttl_from_now
  FROM log_grant((SELECT l FROM dlock.try_acquire('job:a', '10s', 'w1') l));
-- another owner: NULL at once
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('job:a', '10s', 'w2')) AS refused;
-- the same owner again: same token, new expiry
SELECT name, owner, token - :t0 AS token, expires_at - clock_timestamp() BETWEEN '59s' AND '1min' AS extended
  FROM dlock.try_acquire('job:a', '1min', 'w1');
-- a shorter ttl from the same owner shortens the lease: the expiry is ttl from now
SELECT token - :t0 AS token, expires_at - clock_timestamp() BETWEEN '4s' AND '5s' AS shortened
  FROM dlock.try_acquire('job:a', '5s', 'w1');
-- no owner given: the server generates a random 128-bit one
SELECT owner ~ '^[0-9a-f]{32}$' AS generated, token - :t0 AS token
  FROM log_grant((SELECT l FROM dlock.try_acquire('job:b', '10s') l));
SELECT a.owner <> b.owner AS distinct_owners
  FROM dlock.try_acquire('job:c1', '10s') a, dlock.try_acquire('job:c2', '10s') b;
-- a generated owner never matches the holder, so the lease is not extended
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('job:b', '10s')) AS refused;

--
-- renew
--
SELECT name, owner, token - :t0 AS token, expires_at - clock_timestamp() BETWEEN '29s' AND '30s' AS renewed
  FROM dlock.renew('job:a', 'w1', '30s');
SELECT dlock.renew('job:a', 'w2', '30s') IS NULL AS not_holder;
SELECT dlock.renew('never:granted', 'w1', '30s') IS NULL AS never_granted;

--
-- release: compare-and-release
--
SELECT dlock.release('job:a', 'w2') AS wrong_owner;
SELECT dlock.release('never:granted', 'w1') AS never_granted;
SELECT dlock.release('job:a', 'w1') AS released;
SELECT dlock.release('job:a', 'w1') AS released_twice;
SELECT dlock.renew('job:a', 'w1', '30s') IS NULL AS renew_after_release;
-- the next grant, even to the same owner, gets a new, larger token
SELECT name, owner, token - :t0 AS token FROM log_grant((SELECT l FROM dlock.try_acquire('job:a', '10s', 'w1') l));

--
-- fence
--
SELECT dlock.fence('job:a', :t0 + 5) AS current_token,
       dlock.fence('job:a', :t0 + 1) AS old_token,
       dlock.fence('job:a', :t0 + 6) AS future_token,
       dlock.fence('never:granted', :t0 + 1) AS never_granted;

-- A guarded write: only the current token's UPDATE changes the row
CREATE TABLE accounts (id int PRIMARY KEY, balance int);
INSERT INTO accounts VALUES (77, 1000);
UPDATE accounts SET balance = balance - 120 WHERE id = 77 AND dlock.fence('job:a', :t0 + 1);
UPDATE accounts SET balance = balance - 120 WHERE id = 77 AND dlock.fence('job:a', :t0 + 5);
SELECT balance FROM accounts;

-- Per-row calls over many rows give one answer for all of them
CREATE TABLE many (id int, v int);
INSERT INTO many SELECT g, 0 FROM generate_series(1, 100000) g;
UPDATE many SET v = 1 WHERE dlock.fence('job:a', :t0 + 5);
UPDATE many SET v = 2 WHERE dlock.fence('job:a', :t0 + 4);
SELECT v, count(*) FROM many GROUP BY v;

-- A true fence holds the name's lock (AccessShareLock on the name, kind
-- 'name' in dlock.locks) until the transaction ends; a false one holds nothing
BEGIN;
SELECT dlock.fence('job:a', :t0 + 5);
SELECT kind, name, mode, granted FROM dlock.locks WHERE pid = pg_backend_pid();
COMMIT;
BEGIN;
SELECT dlock.fence('job:a', :t0 + 4);
SELECT count(*) AS dlock_locks FROM dlock.locks WHERE pid = pg_backend_pid();
COMMIT;

-- Application advisory locks live in another key space: no interference
SELECT pg_try_advisory_lock(0, 0) AS app_lock, dlock.fence('job:a', :t0 + 5) AS fence;
SELECT pg_advisory_unlock(0, 0);

--
-- expiry, on the server's clock
--
SELECT token AS short_token FROM log_grant((SELECT l FROM dlock.try_acquire('job:short', '100ms', 'w1') l)) \gset
SELECT dlock.fence('job:short', :short_token) AS live_before;
SELECT pg_sleep(0.2);
SELECT state FROM dlock.leases WHERE name = 'job:short';
SELECT dlock.fence('job:short', :short_token) AS live_after,
       dlock.renew('job:short', 'w1', '10s') IS NULL AS renew_refused,
       dlock.release('job:short', 'w1') AS release_refused;
-- the lease is free: another owner gets a new token
SELECT owner, token - :t0 AS token FROM log_grant((SELECT l FROM dlock.try_acquire('job:short', '10s', 'w2') l));
-- the old holder asking again after expiry gets no lease while w2 holds it
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('job:short', '10s', 'w1')) AS refused;

--
-- acquire: waiting
--
-- free name: granted at once, timeout or not
SELECT owner, token - :t0 AS token FROM log_grant(dlock.acquire('job:d', '10s', 'w1'));
SELECT owner, token - :t0 AS token FROM log_grant(dlock.acquire('job:e', '10s', 'w1', '0'));
-- same owner: extended at once
SELECT owner, token - :t0 AS token FROM dlock.acquire('job:d', '10s', 'w1', '0');
-- timeout 0 does not wait
SELECT dlock.acquire('job:d', '10s', 'w2', '0');
-- a timeout waits, then raises lock_not_available
SELECT clock_timestamp() AS wait_start \gset
\set VERBOSITY default
DO $$
BEGIN
  PERFORM dlock.acquire('job:d', '10s', 'w2', '300ms');
EXCEPTION WHEN lock_not_available THEN
  RAISE NOTICE 'timed out: %', SQLERRM;
END $$;
SELECT clock_timestamp() - :'wait_start' >= '300ms' AS waited_for_timeout;
-- a waiter is granted once the holder's lease expires, without a release
SELECT owner, token - :t0 AS token FROM log_grant(dlock.acquire('job:f', '300ms', 'w1'));
SELECT clock_timestamp() AS wait_start \gset
SELECT owner, token - :t0 AS token FROM log_grant(dlock.acquire('job:f', '10s', 'w2', '5s'));
SELECT clock_timestamp() - :'wait_start' >= '250ms' AS waited_for_expiry;
-- statement_timeout ends an unbounded wait
SET statement_timeout = '200ms';
SELECT dlock.acquire('job:f', '10s', 'w3');
RESET statement_timeout;

--
-- force_release
--
SELECT token AS g_token FROM log_grant((SELECT l FROM dlock.try_acquire('job:g', '1h', 'w1') l)) \gset
SELECT dlock.fence('job:g', :g_token) AS live_before_force;
SELECT dlock.force_release('job:g') AS forced;
SELECT dlock.force_release('job:g') AS forced_twice;
SELECT dlock.force_release('never:granted') AS never_granted;
SELECT dlock.fence('job:g', :g_token) AS old_token_fenced_off,
       dlock.release('job:g', 'w1') AS holder_release,
       dlock.renew('job:g', 'w1', '1s') IS NULL AS holder_renew_refused;
SELECT owner, token - :t0 AS token FROM log_grant((SELECT l FROM dlock.try_acquire('job:g', '1h', 'w2') l));

--
-- the view
--
SELECT dlock.release('job:f', 'w2');
SELECT EXISTS (SELECT FROM dlock.try_acquire('job:x', '1ms', 'w1')) AS granted;
SELECT pg_sleep(0.01);
SELECT EXISTS (SELECT FROM dlock.try_acquire('job:y', '1h', 'w1')) AS granted;
SELECT dlock.force_release('job:y');
SELECT name, token - :t0 AS token, owner, holder_role::text = current_user AS held_by_me, state,
       acquired_at <= expires_at AS ordered,
       (ended_at IS NOT NULL) = (state IN ('released', 'force_released')) AS ended_marked
  FROM dlock.leases
 WHERE name IN ('job:a', 'job:f', 'job:x', 'job:y')
 ORDER BY name;

--
-- Tokens only grow, across names, in grant order
--
SELECT count(*) AS grants,
       bool_and(token > prev) AS strictly_increasing
  FROM (SELECT token, lag(token, 1, 0::bigint) OVER (ORDER BY seq) AS prev FROM granted) g;

DROP TABLE granted, accounts, many;
DROP FUNCTION log_grant(dlock.lease);

--
-- A refused try_acquire returns no row (1.2), in the FROM form, the scalar
-- form and PL/pgSQL's FOUND, so that "is there a row" means "granted"
--
SELECT EXISTS (SELECT FROM dlock.try_acquire('setof:a', '1h', 'w1')) AS granted;
SELECT count(*) AS rows_when_refused FROM dlock.try_acquire('setof:a', '1h', 'w2');
SELECT token FROM dlock.try_acquire('setof:a', '1h', 'w2');
SELECT (dlock.try_acquire('setof:a', '1h', 'w2')).token AS scalar_form;
SELECT count(*) AS rows_when_granted FROM dlock.try_acquire('setof:b', '1h', 'w2');
DO $$
DECLARE
  l dlock.lease;
BEGIN
  SELECT * INTO l FROM dlock.try_acquire('setof:a', '1h', 'w3');
  RAISE NOTICE 'refused: FOUND is %', FOUND;
  SELECT * INTO l FROM dlock.try_acquire('setof:c', '1h', 'w3');
  RAISE NOTICE 'granted: FOUND is %, owner %', FOUND, l.owner;
END
$$;
SELECT dlock.release('setof:a', 'w1'), dlock.release('setof:b', 'w2'),
       dlock.release('setof:c', 'w3');

--
-- An owner-less acquire() repeated by the session that holds the lease
-- under its generated owner would wait for itself: 55006 at once
--
SELECT owner AS self_owner FROM dlock.acquire('self:a', '1h') \gset
\set VERBOSITY default
SELECT dlock.acquire('self:a', '1h');
-- the same with a timeout: still at once, not after it
SELECT dlock.acquire('self:a', '1h', timeout => '1h');
-- a shared lease of the name waits for this session's exclusive one too
SELECT dlock.acquire('self:a', '1h', shared => true);
-- a semaphore whose every permit this session holds
SELECT token > 0 AS permit_1 FROM dlock.acquire('self:p', '1h', max_holders => 2);
SELECT token > 0 AS permit_2 FROM dlock.acquire('self:p', '1h', max_holders => 2);
SELECT dlock.acquire('self:p', '1h', max_holders => 2);
-- timeout 0 never waits: the usual 55P03
SELECT dlock.acquire('self:a', '1h', timeout => '0');
-- with the owner it holds, the lease is extended at once
SELECT token > 0 AS extended FROM dlock.acquire('self:a', '1h', :'self_owner');
-- (a lease of another session's generated owner is waited for as usual:
-- test/specs/self_wait.spec); behind a pooler (dlock.allow_session_bound off) this backend may serve
-- another client, whose lease it may be: it waits
SET dlock.allow_session_bound = off;
SELECT dlock.acquire('self:a', '1h', timeout => '100ms');
RESET dlock.allow_session_bound;
\set VERBOSITY terse
SELECT dlock.release('self:a', :'self_owner');
SELECT count(*) AS force_released FROM dlock.leases l, LATERAL dlock.force_release(l.name) f
 WHERE l.name = 'self:p' AND f;
