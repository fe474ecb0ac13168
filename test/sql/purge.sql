--
-- dlock.purge(): which names it deletes and which it keeps, that a purged
-- name's old tokens stay false and its next token is larger, the caller's
-- own transaction, batches, bad input and who may call it.  Races with
-- other sessions are in test/specs/purge_race.spec, waiters in
-- test/t/012_purge_cron.pl.
--
-- A database of its own, so that only the names made here are there to
-- purge.
--
\set regress_db :DBNAME
CREATE DATABASE regress_dlock_purge;
\c regress_dlock_purge
CREATE EXTENSION dlock;

-- Tokens follow the server's clock: the first grant of each incarnation of
-- the database (here the first since CREATE EXTENSION) moves the counter up
-- to it (docs/internals.md, I1), so their values differ from run to run.  A
-- warm-up grant of a name of its own makes that move; tokens below are shown
-- relative to the counter after it (t0), as the small numbers a counter
-- starting at 1 would have given.  Its row is deleted, so that only the
-- names made below are there to purge.
SELECT dlock.release('tokens:warm-up', 'w') FROM dlock.try_acquire('tokens:warm-up', '1h', 'w');
SELECT last_value AS t0 FROM dlock.token_seq \gset
DELETE FROM dlock.lease_state WHERE name = 'tokens:warm-up';

CREATE FUNCTION pg_temp.outcome(call text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  EXECUTE 'SELECT (' || call || ')::text' INTO result;
  RETURN 'ok: ' || result;
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- Moves a lease into the past, as if it had been granted (and ended) ago
CREATE FUNCTION pg_temp.age_lease(lease text, ago interval) RETURNS void
LANGUAGE sql AS $$
  UPDATE dlock.lease_state
     SET acquired_at = acquired_at - ago, expires_at = expires_at - ago,
         ended_at = ended_at - ago
   WHERE name = lease
$$;

-- Every token granted below
CREATE TABLE granted (name text, token bigint);
GRANT ALL ON granted TO PUBLIC;
CREATE FUNCTION pg_temp.log_grant(l dlock.lease) RETURNS bigint
LANGUAGE sql AS $$ INSERT INTO granted VALUES (l.name, l.token) RETURNING token $$;

--
-- One name in each state
--
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('live', '1h', 'o') l)) - :t0 AS token;
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('released:new', '1h', 'o') l)) - :t0 AS token;
SELECT dlock.release('released:new', 'o');
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('released:old', '1h', 'o') l)) - :t0 AS token;
SELECT dlock.release('released:old', 'o');
SELECT pg_temp.age_lease('released:old', '2h');
-- expired 2h ago, without and with a lock-delay that has not passed yet
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('expired:old', '1s', 'o', '0s') l)) - :t0 AS token;
SELECT pg_temp.age_lease('expired:old', '2h');
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('expired:delay', '1s', 'o', '3h') l)) - :t0 AS token;
SELECT pg_temp.age_lease('expired:delay', '2h');
-- expired 30 minutes ago
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('expired:new', '1h', 'o', '0s') l)) - :t0 AS token;
SELECT pg_temp.age_lease('expired:new', '90min');
-- force-released 2h ago: past a lock-delay of 1h, and in one of 3h
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('forced:old', '1h', 'o', '1h') l)) - :t0 AS token;
SELECT dlock.force_release('forced:old');
SELECT pg_temp.age_lease('forced:old', '2h');
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('forced:delay', '1h', 'o', '3h') l)) - :t0 AS token;
SELECT dlock.force_release('forced:delay');
SELECT pg_temp.age_lease('forced:delay', '2h');
-- session-bound: its session lock given up (the backend's exit, as far as
-- the lease can tell), with an hour of ttl left; and one still held
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('session:ended', '1h', 'o', session_bound => true) l)) - :t0 AS token;
SELECT pg_advisory_unlock_all();
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('session:live', '1h', 'o', session_bound => true) l)) - :t0 AS token;

SELECT name, state FROM dlock.leases ORDER BY name;

-- Ended at least an hour ago and past their lock-delay
SELECT dlock.purge('1 hour') AS purged;
SELECT name, state FROM dlock.leases ORDER BY name;

-- Everything that is grantable now; the session-bound lease whose backend
-- went counts from its expiry, an hour ahead
SELECT dlock.purge('0') AS purged;
SELECT name, state FROM dlock.leases ORDER BY name;
SELECT pg_temp.age_lease('session:ended', '2h');
SELECT dlock.purge('1 hour') AS purged;
SELECT name, state FROM dlock.leases ORDER BY name;

-- The default: a day
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('released:day', '1h', 'o') l)) - :t0 AS token;
SELECT dlock.release('released:day', 'o');
SELECT pg_temp.age_lease('released:day', '25h');
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('released:hours', '1h', 'o') l)) - :t0 AS token;
SELECT dlock.release('released:hours', 'o');
SELECT pg_temp.age_lease('released:hours', '23h');
SELECT dlock.purge() AS purged;
SELECT name FROM dlock.lease_state WHERE name LIKE 'released:%' ORDER BY name;
SELECT dlock.purge('0') AS purged;
SELECT name, state FROM dlock.leases ORDER BY name;

--
-- A purged name's old token stays false, and its next grant is larger than
-- every token issued before
--
SELECT dlock.fence(name, token) AS old_token_fences FROM granted WHERE name = 'released:old';
SELECT max(token) AS max_before FROM granted \gset
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('released:old', '1h', 'o2') l)) > :max_before
       AS larger_than_every_token;
SELECT dlock.fence('released:old', min(token)) AS old_token_fences,
       dlock.fence('released:old', max(token)) AS new_token_fences
  FROM granted WHERE name = 'released:old';

--
-- The caller's own transaction: a name it fenced or changed is not purged,
-- since the lock manager would let it take the name's lock anyway
--
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('own:fenced', '2s', 'o') l)) AS fenced_token \gset
BEGIN;
SELECT dlock.fence('own:fenced', :fenced_token) AS fenced;
SELECT pg_sleep_until(expires_at + '10ms') FROM dlock.lease_state WHERE name = 'own:fenced';
SELECT state FROM dlock.leases WHERE name = 'own:fenced';
SELECT dlock.purge('0') AS purged_while_fenced;
COMMIT;
SELECT dlock.purge('0') AS purged_after_commit;

BEGIN;
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('own:changed', '1h', 'o') l)) IS NOT NULL AS granted;
SELECT dlock.release('own:changed', 'o');
SELECT dlock.purge('0') AS purged_while_changed;
COMMIT;
SELECT dlock.purge('0') AS purged_after_commit;

-- Purged and granted again in one transaction: the new row is inserted
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('own:regrant', '1h', 'o') l)) IS NOT NULL AS granted;
SELECT dlock.release('own:regrant', 'o');
BEGIN;
SELECT dlock.purge('0') AS purged;
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('own:regrant', '1h', 'o') l)) =
       (SELECT last_value FROM dlock.token_seq) AS granted_newest;
COMMIT;
SELECT name, state FROM dlock.leases WHERE name = 'own:regrant';

-- Purged and rolled back: the row is back
SELECT dlock.release('own:regrant', 'o');
BEGIN;
SELECT dlock.purge('0') AS purged;
ROLLBACK;
SELECT name, state FROM dlock.leases WHERE name = 'own:regrant';

--
-- Batches: a call holds at most 1000 locks (here a quarter of the lock
-- table is more), one per name of a plain lease, which the transaction
-- keeps; the procedure that loops until nothing is left (docs/operations.md's
-- recipe).  Names with many permits against a small lock table are in
-- test/t/012_purge_cron.pl.
--
INSERT INTO dlock.lease_state (name, token, owner, holder_role, acquired_at,
                               expires_at, ended_at, end_reason, lock_delay,
                               session_bound)
SELECT 'batch:' || i, nextval('dlock.token_seq'), 'o', current_user::regrole::dlock.holder,
       now() - interval '3 days', now() - interval '2 days', now() - interval '2 days',
       'released', '0', false
  FROM generate_series(1, 2500) i;
BEGIN;
SELECT dlock.purge('1 day') AS purged;
SELECT count(*) FILTER (WHERE kind = 'name') AS name_locks_held,
       count(*) FILTER (WHERE kind = 'pin') AS pins_held
  FROM dlock.locks WHERE pid = pg_backend_pid() AND granted;
COMMIT;

CREATE PROCEDURE purge_all(older_than interval DEFAULT '1 day')
LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    EXIT WHEN dlock.purge(older_than) = 0;
    COMMIT;
  END LOOP;
END $$;
CALL purge_all();
SELECT count(*) AS batch_names_left FROM dlock.lease_state WHERE name LIKE 'batch:%';

-- The budget counts locks, not names: a name of 16 permits needs its lock
-- and 15 pins, so a call takes 62 of them (992 locks), and the next the rest
CREATE PROCEDURE permits(names int)
LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. names LOOP
    PERFORM dlock.try_acquire('permits:' || i, '1h', 'o' || j, max_holders => 16)
       FROM generate_series(1, 16) j;
    PERFORM dlock.release('permits:' || i, 'o' || j) FROM generate_series(1, 16) j;
    COMMIT;
  END LOOP;
END $$;
SELECT dlock.purge('0') AS purged_others;
CALL permits(70);
SELECT count(*) AS permit_rows FROM dlock.lease_state WHERE name LIKE 'permits:%';
BEGIN;
SELECT dlock.purge('0') AS purged;
SELECT count(*) FILTER (WHERE kind = 'name') AS name_locks_held,
       count(*) FILTER (WHERE kind = 'pin') AS pins_held
  FROM dlock.locks WHERE pid = pg_backend_pid() AND granted;
COMMIT;
SELECT dlock.purge('0') AS purged;
SELECT count(*) AS permit_rows_left FROM dlock.lease_state WHERE name LIKE 'permits:%';
DROP PROCEDURE permits(int);

--
-- Bad input and the wrong kind of transaction
--
SELECT call, pg_temp.outcome(call) FROM (VALUES
  ($$dlock.purge(NULL)$$),
  ($$dlock.purge('-1 second')$$),
  ($$dlock.purge('1 day -25 hours')$$),
  ($$dlock.purge('1 month')$$),
  ($$dlock.purge('1 year')$$),
  ($$dlock.purge('200000000 days')$$)
) AS calls(call);
BEGIN TRANSACTION READ ONLY;
SELECT pg_temp.outcome($$dlock.purge('0')$$);
ROLLBACK;

--
-- Who may call it: superusers and roles with the privileges of the
-- database's owner; it purges every role's names
--
CREATE ROLE regress_dlock_purge_user;
CREATE ROLE regress_dlock_purge_owner;
SET ROLE regress_dlock_purge_user;
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('user:name', '1h', 'u') l)) - :t0 AS token;
SELECT dlock.release('user:name', 'u');
SELECT pg_temp.outcome($$dlock.purge('0')$$) AS as_user;
SELECT dlock.purge('0');
RESET ROLE;
ALTER DATABASE regress_dlock_purge OWNER TO regress_dlock_purge_owner;
SET ROLE regress_dlock_purge_owner;
SELECT pg_temp.outcome($$dlock.purge('0')$$) AS as_database_owner;
RESET ROLE;
SET ROLE regress_dlock_purge_user;
SELECT pg_temp.log_grant((SELECT l FROM dlock.try_acquire('user:name', '1h', 'u') l)) IS NOT NULL AS granted;
SELECT dlock.release('user:name', 'u');
RESET ROLE;
GRANT regress_dlock_purge_owner TO regress_dlock_purge_user;
SET ROLE regress_dlock_purge_user;
SELECT pg_temp.outcome($$dlock.purge('0')$$) AS as_member_of_owner;
RESET ROLE;
ALTER DATABASE regress_dlock_purge OWNER TO CURRENT_USER;

-- Tokens only ever grew, across all the purges above
SELECT count(*) = count(DISTINCT token) AS tokens_unique,
       max(token) <= (SELECT last_value FROM dlock.token_seq) AS within_counter
  FROM granted;

\c :regress_db
DROP DATABASE regress_dlock_purge;
DROP ROLE regress_dlock_purge_user;
DROP ROLE regress_dlock_purge_owner;
