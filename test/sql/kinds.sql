--
-- Kinds of leases, in one session: shared leases (any number live beside
-- one another, none beside an exclusive one) and the permits of counting
-- semaphores (at most max_holders live), each holder with its own token,
-- renewed, released and fenced on its own, in reusable slots.  Bad or
-- contradicting arguments change nothing.  The waits between sessions are
-- in test/specs/shared_fence.spec, test/specs/semaphore.spec and
-- test/specs/kinds_fifo.spec.
--

CREATE FUNCTION pg_temp.outcome(call text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE 'SELECT ' || call;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- the live holders of a name, by slot, and how many rows the name has
CREATE FUNCTION pg_temp.holders(n text) RETURNS TABLE (slot int, owner text, shared boolean, max_holders int)
LANGUAGE sql AS $$
  SELECT s.slot, l.owner, l.shared, l.max_holders
    FROM dlock.leases l JOIN dlock.lease_state s USING (name, token)
   WHERE l.name = n AND l.state = 'live' ORDER BY s.slot
$$;

--
-- Bad input, and requests that contradict the live leases: the documented
-- SQLSTATE, nothing changed, no token drawn
--
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:shared', '1h', 'r1', shared => true)) AS granted;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:sem', '1h', 'p1', max_holders => 2)) AS granted;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:excl', '1h', 'x1')) AS granted;

CREATE TEMP TABLE state_before AS SELECT * FROM dlock.lease_state;
SELECT last_value AS counter_before FROM dlock.token_seq \gset

SELECT call, pg_temp.outcome(call) FROM (VALUES
  -- NULL: 22004
  ($$dlock.try_acquire('kinds:n', '1s', shared => NULL)$$),
  ($$dlock.try_acquire('kinds:n', '1s', max_holders => NULL)$$),
  ($$dlock.acquire('kinds:n', '1s', shared => NULL)$$),
  ($$dlock.acquire('kinds:n', '1s', max_holders => NULL)$$),
  -- out of range: 22023
  ($$dlock.try_acquire('kinds:n', '1s', max_holders => 0)$$),
  ($$dlock.try_acquire('kinds:n', '1s', max_holders => -1)$$),
  ($$dlock.try_acquire('kinds:n', '1s', max_holders => 1001)$$),
  ($$dlock.acquire('kinds:n', '1s', max_holders => 0)$$),
  ($$dlock.acquire('kinds:n', '1s', max_holders => 2147483647)$$),
  -- shared and counted at once: 22023
  ($$dlock.try_acquire('kinds:n', '1s', shared => true, max_holders => 2)$$),
  ($$dlock.acquire('kinds:n', '1s', shared => true, max_holders => 1000)$$),
  -- another max_holders than the live leases': 22023
  ($$dlock.try_acquire('kinds:sem', '1s', 'p2', max_holders => 3)$$),
  ($$dlock.acquire('kinds:sem', '1s', 'p2', max_holders => 1000)$$),
  ($$dlock.try_acquire('kinds:sem', '1s', 'p2')$$),
  ($$dlock.try_acquire('kinds:sem', '1s', 'p2', shared => true)$$),
  ($$dlock.try_acquire('kinds:shared', '1s', 'p2', max_holders => 2)$$),
  ($$dlock.try_acquire('kinds:excl', '1s', 'p2', max_holders => 2)$$),
  ($$dlock.acquire('kinds:excl', '1s', 'p2', timeout => '0', max_holders => 2)$$),
  -- the same owner asking for another kind than it holds: 22023
  ($$dlock.try_acquire('kinds:shared', '1s', 'r1')$$),
  ($$dlock.acquire('kinds:shared', '1s', 'r1')$$),
  ($$dlock.try_acquire('kinds:excl', '1s', 'x1', shared => true)$$),
  ($$dlock.try_acquire('kinds:sem', '1s', 'p1', shared => true)$$),
  ($$dlock.try_acquire('kinds:sem', '1s', 'p1', max_holders => 3)$$)
) AS bad(call);

-- Nothing changed, and no token was drawn
SELECT count(*) AS changed_rows
  FROM ((TABLE state_before EXCEPT TABLE dlock.lease_state)
        UNION ALL (TABLE dlock.lease_state EXCEPT TABLE state_before)) d;
SELECT last_value = :counter_before AS counter_unchanged FROM dlock.token_seq;
SELECT count(*) AS rows_of_n FROM dlock.lease_state WHERE name = 'kinds:n';

-- Messages as a user sees them, with detail and hint
\set VERBOSITY default
SELECT dlock.try_acquire('kinds:n', '1s', max_holders => 0);
SELECT dlock.try_acquire('kinds:n', '1s', shared => true, max_holders => 2);
SELECT dlock.try_acquire('kinds:sem', '1s', 'p2', max_holders => 3);
SELECT dlock.try_acquire('kinds:excl', '1s', 'p2', max_holders => 2);
SELECT dlock.try_acquire('kinds:shared', '1s', 'r1');
SELECT dlock.try_acquire('kinds:sem', '1s', 'p1', shared => true);
\set VERBOSITY terse

-- The limits themselves are accepted: max_holders => 1 asks for an
-- exclusive lease, or a shared one beside shared => true; a semaphore of
-- 1000
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:one', '1h', 'o', max_holders => 1)) AS granted;
SELECT * FROM pg_temp.holders('kinds:one');
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:one-shared', '1h', 'o', shared => true, max_holders => 1)) AS granted;
SELECT * FROM pg_temp.holders('kinds:one-shared');
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:thousand', '1h', 'o', max_holders => 1000)) AS granted;
SELECT * FROM pg_temp.holders('kinds:thousand');

--
-- Shared leases: live beside one another, each with its own token; no
-- exclusive lease beside them
--
SELECT dlock.release('kinds:shared', 'r1');
SELECT token AS s1 FROM dlock.try_acquire('kinds:shared', '1h', 's1', shared => true) \gset
SELECT token AS s2 FROM dlock.acquire('kinds:shared', '1h', 's2', shared => true, timeout => '0') \gset
SELECT token AS s3 FROM dlock.try_acquire('kinds:shared', '1h', 's3', shared => true) \gset
SELECT :s1 < :s2 AND :s2 < :s3 AS own_growing_tokens;
SELECT * FROM pg_temp.holders('kinds:shared');
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:shared', '1h', 'x')) AS exclusive_refused;
\set VERBOSITY default
SELECT dlock.acquire('kinds:shared', '1h', 'x', timeout => '0');
SELECT dlock.acquire('kinds:shared', '1h', 'x', timeout => '10ms');
\set VERBOSITY terse
SELECT count(*) AS rows_of_x FROM dlock.leases WHERE name = 'kinds:shared' AND owner = 'x';

-- Each token fences true, a token that is not a live lease of the name
-- false
SELECT dlock.fence('kinds:shared', :s1) AS s1, dlock.fence('kinds:shared', :s2) AS s2,
       dlock.fence('kinds:shared', :s3) AS s3, dlock.fence('kinds:shared', :s3 + 1000) AS other,
       dlock.fence('kinds:excl', :s1) AS on_another_name;

-- The same owner asking again gets its own lease back: same token, new
-- expiry; the others are untouched
SELECT expires_at AS s1_expiry FROM dlock.leases WHERE name = 'kinds:shared' AND owner = 's1' \gset
SELECT token = :s2 AS same_token,
       expires_at - clock_timestamp() BETWEEN '1h59min' AND '2h' AS extended
  FROM dlock.try_acquire('kinds:shared', '2h', 's2', shared => true);
SELECT token = :s3 AS same_token FROM dlock.acquire('kinds:shared', '1h', 's3', shared => true, timeout => '0');
SELECT owner, expires_at - acquired_at > '1h30min' AS long FROM dlock.leases
 WHERE name = 'kinds:shared' ORDER BY owner;
SELECT expires_at = :'s1_expiry' AS s1_untouched FROM dlock.leases WHERE name = 'kinds:shared' AND owner = 's1';

-- renew and release act on the caller's own lease only
SELECT token = :s1 AS same_token FROM dlock.renew('kinds:shared', 's1', '3h');
SELECT dlock.renew('kinds:shared', 'nobody', '3h') IS NULL AS not_a_holder;
SELECT owner, expires_at - clock_timestamp() > '2h30min' AS renewed FROM dlock.leases
 WHERE name = 'kinds:shared' ORDER BY owner;
SELECT dlock.release('kinds:shared', 's2') AS released;
SELECT dlock.release('kinds:shared', 's2') AS released_again;
SELECT owner, state FROM dlock.leases WHERE name = 'kinds:shared' ORDER BY owner;
SELECT dlock.fence('kinds:shared', :s1) AS s1, dlock.fence('kinds:shared', :s2) AS s2,
       dlock.fence('kinds:shared', :s3) AS s3;
-- the free slot is taken again, by the lowest free slot first
SELECT token > :s3 AS newer_token FROM dlock.try_acquire('kinds:shared', '1h', 's4', shared => true);
SELECT * FROM pg_temp.holders('kinds:shared');

-- force_release ends every live lease of the name, then finds none
SELECT dlock.force_release('kinds:shared') AS forced;
SELECT owner, state FROM dlock.leases WHERE name = 'kinds:shared' ORDER BY owner;
SELECT dlock.force_release('kinds:shared') AS forced_again;
SELECT dlock.fence('kinds:shared', :s1) AS s1, dlock.fence('kinds:shared', :s3) AS s3;

-- An exclusive lease: no shared lease beside it; once it is released, a
-- shared one is granted
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:excl', '1h', 's', shared => true)) AS shared_refused;
\set VERBOSITY default
SELECT dlock.acquire('kinds:excl', '1h', 's', timeout => '0', shared => true);
\set VERBOSITY terse
SELECT dlock.release('kinds:excl', 'x1');
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:excl', '1h', 's', shared => true)) AS shared_granted;
SELECT * FROM pg_temp.holders('kinds:excl');

-- Up to 1000 shared leases live at once
SELECT count((SELECT token FROM dlock.try_acquire('kinds:many', '1h', 'r' || i, shared => true))) AS granted
  FROM generate_series(1, 1000) i;
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:many', '1h', 'r1001', shared => true)) AS refused_1001st;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:many', '1h', 'r500', shared => true)) AS holder_again;
SELECT count(*) AS live, count(DISTINCT token) AS tokens, max(slot) AS top_slot
  FROM dlock.leases l JOIN dlock.lease_state s USING (name, token)
 WHERE l.name = 'kinds:many' AND l.state = 'live';
SELECT dlock.force_release('kinds:many') AS forced;

--
-- A semaphore: at most max_holders live permits, each with its own token
--
SELECT dlock.release('kinds:sem', 'p1');
SELECT token AS p1 FROM dlock.try_acquire('kinds:sem', '1h', 'p1', max_holders => 3) \gset
SELECT token AS p2 FROM dlock.acquire('kinds:sem', '1h', 'p2', max_holders => 3) \gset
SELECT token AS p3 FROM dlock.try_acquire('kinds:sem', '1h', 'p3', max_holders => 3) \gset
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:sem', '1h', 'p4', max_holders => 3)) AS fourth_refused;
\set VERBOSITY default
SELECT dlock.acquire('kinds:sem', '1h', 'p4', timeout => '0', max_holders => 3);
\set VERBOSITY terse
SELECT * FROM pg_temp.holders('kinds:sem');
-- neither an exclusive nor a shared lease beside the permits: they must
-- ask for the same limit (a permit of a semaphore of 1 is an exclusive
-- lease)
SELECT pg_temp.outcome($$dlock.try_acquire('kinds:sem', '1h', 'x')$$);
SELECT pg_temp.outcome($$dlock.try_acquire('kinds:sem', '1h', 'x', shared => true)$$);
-- the same owner gets its own permit back; one permit ends, another
-- owner takes its slot
SELECT token = :p2 AS same_token FROM dlock.try_acquire('kinds:sem', '1h', 'p2', max_holders => 3);
SELECT token = :p3 AS same_token FROM dlock.renew('kinds:sem', 'p3', '2h');
SELECT dlock.release('kinds:sem', 'p2') AS released;
SELECT dlock.fence('kinds:sem', :p1) AS p1, dlock.fence('kinds:sem', :p2) AS p2,
       dlock.fence('kinds:sem', :p3) AS p3;
SELECT token > :p3 AS newer_token FROM dlock.try_acquire('kinds:sem', '1h', 'p4', max_holders => 3);
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:sem', '1h', 'p5', max_holders => 3)) AS full_again;
SELECT * FROM pg_temp.holders('kinds:sem');

-- A permit in its lock-delay still takes one of the permits, and keeps a
-- request with another limit waiting (refused: it is not live, so there is
-- no limit to contradict)
SELECT dlock.release('kinds:sem', 'p1'), dlock.release('kinds:sem', 'p3'), dlock.release('kinds:sem', 'p4');
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:sem', '1h', 'd1', lock_delay => '1h', max_holders => 2)) AS granted;
SELECT dlock.force_release('kinds:sem') AS forced;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:sem', '1h', 'd2', max_holders => 2)) AS second_granted;
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:sem', '1h', 'd3', max_holders => 2)) AS third_refused;
SELECT owner, state FROM dlock.leases WHERE name = 'kinds:sem' AND state <> 'released' ORDER BY owner;
SELECT dlock.release('kinds:sem', 'd2');
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:sem', '1h', 'd4', max_holders => 5)) AS delayed_permit_of_2;
-- an expired permit gives its slot back on the server's clock
SELECT token AS e1 FROM dlock.try_acquire('kinds:expiring', '500ms', 'e1', max_holders => 2) \gset
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:expiring', '1h', 'e2', max_holders => 2)) AS granted;
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:expiring', '1h', 'e3', max_holders => 2)) AS full;
SELECT pg_sleep(0.6);
SELECT dlock.fence('kinds:expiring', :e1) AS expired_token;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:expiring', '1h', 'e3', max_holders => 2)) AS granted_after_expiry;
SELECT * FROM pg_temp.holders('kinds:expiring');
SELECT count(*) AS rows_of_expiring FROM dlock.lease_state WHERE name = 'kinds:expiring';

--
-- Tokens strictly increase over the grants of every kind on one name
--
CREATE TEMP TABLE grants (seq serial, kind text, token bigint);
INSERT INTO grants (kind, token) SELECT 'exclusive', token FROM dlock.try_acquire('kinds:mixed', '1h', 'a');
SELECT dlock.release('kinds:mixed', 'a');
INSERT INTO grants (kind, token) SELECT 'shared', token FROM dlock.try_acquire('kinds:mixed', '1h', 'b', shared => true);
INSERT INTO grants (kind, token) SELECT 'shared', token FROM dlock.try_acquire('kinds:mixed', '1h', 'c', shared => true);
SELECT dlock.release('kinds:mixed', 'b'), dlock.release('kinds:mixed', 'c');
INSERT INTO grants (kind, token) SELECT 'permit', token FROM dlock.try_acquire('kinds:mixed', '1h', 'd', max_holders => 2);
INSERT INTO grants (kind, token) SELECT 'permit', token FROM dlock.try_acquire('kinds:mixed', '1h', 'e', max_holders => 2);
SELECT dlock.force_release('kinds:mixed');
INSERT INTO grants (kind, token) SELECT 'exclusive', token FROM dlock.try_acquire('kinds:mixed', '1h', 'a');
SELECT dlock.release('kinds:mixed', 'a');
INSERT INTO grants (kind, token) SELECT 'shared', token FROM dlock.try_acquire('kinds:mixed', '1h', 'b', shared => true);
SELECT string_agg(kind, ' ' ORDER BY seq) AS kinds, count(*) AS grants,
       bool_and(token > prev) AS strictly_increasing
  FROM (SELECT seq, kind, token, lag(token, 1, 0::bigint) OVER (ORDER BY seq) AS prev FROM grants) g;
SELECT max(token) = (SELECT max(token) FROM dlock.lease_state) AS newest_token_in_table FROM grants;

--
-- dlock.leases: one row per holder, with its kind
--
SELECT name, owner, state, shared, max_holders FROM dlock.leases
 WHERE name IN ('kinds:excl', 'kinds:mixed', 'kinds:expiring', 'kinds:one')
 ORDER BY name, token;

-- pg_stat_force_next_flush() is new in PostgreSQL 15.  Before, a session
-- sends its statistics at the end of a statement that ends 500 ms
-- (PGSTAT_STAT_INTERVAL) or more after its last report, and a reader takes a
-- statistics file up to 500 ms old: a stand-in that sleeps 0.6 s does both
DO $$
BEGIN
  IF to_regprocedure('pg_catalog.pg_stat_force_next_flush()') IS NULL THEN
    CREATE OR REPLACE FUNCTION public.pg_stat_force_next_flush() RETURNS void
      LANGUAGE sql AS 'SELECT pg_sleep(0.6)';
  END IF;
END
$$;

--
-- Slots are reused: 200 rounds of three shared leases, one exclusive lease
-- and two permits, each step its own transaction, leave the name with four
-- rows, updated in place (HOT): slots 0 and 1 for the exclusive lease and
-- the permits, slots 1 to 3 for the shared leases, which leave slot 0 (its
-- pin is the name's own lock, which readers granted at once would all need)
-- to the other kinds.  The one insert is the exclusive lease's first row.
--
SELECT count((SELECT token FROM dlock.try_acquire('kinds:reuse', '1h', 'r' || i, shared => true))) AS granted
  FROM generate_series(1, 3) i;
SELECT count(*) FILTER (WHERE dlock.release('kinds:reuse', 'r' || i)) AS released
  FROM generate_series(1, 3) i;
SELECT pg_stat_force_next_flush();
CREATE TEMP TABLE updates_before AS
  SELECT n_tup_upd AS upd, n_tup_hot_upd AS hot, n_tup_ins AS ins
    FROM pg_stat_user_tables WHERE relid = 'dlock.lease_state'::regclass;
SET synchronous_commit = off;
DO $$
BEGIN
  FOR round IN 1 .. 200 LOOP
    PERFORM dlock.try_acquire('kinds:reuse', '1h', 'r' || i, shared => true) FROM generate_series(1, 3) i;
    COMMIT;
    PERFORM dlock.release('kinds:reuse', 'r' || i) FROM generate_series(1, 3) i;
    COMMIT;
    PERFORM dlock.try_acquire('kinds:reuse', '1h', 'x');
    COMMIT;
    PERFORM dlock.release('kinds:reuse', 'x');
    COMMIT;
    PERFORM dlock.try_acquire('kinds:reuse', '1h', 'p' || i, max_holders => 2) FROM generate_series(1, 2) i;
    COMMIT;
    PERFORM dlock.release('kinds:reuse', 'p' || i) FROM generate_series(1, 2) i;
    COMMIT;
  END LOOP;
END
$$;
RESET synchronous_commit;
SELECT pg_stat_force_next_flush();
SELECT s.n_tup_upd - b.upd AS updates, s.n_tup_ins - b.ins AS inserts,
       (s.n_tup_hot_upd - b.hot) >= 0.9 * (s.n_tup_upd - b.upd) AS at_least_90_percent_hot
  FROM pg_stat_user_tables s, updates_before b
 WHERE s.relid = 'dlock.lease_state'::regclass;
SELECT s.slot, l.owner, l.state, l.shared, l.max_holders
  FROM dlock.lease_state s JOIN dlock.leases l USING (name, token)
 WHERE name = 'kinds:reuse' ORDER BY s.slot;

--
-- A true fence pins the token of a shared lease with the token's own pin
-- lock (kind 'pin' in dlock.locks; an exclusive lease's is the name's own
-- lock, kind 'name'), until the end of the transaction
--
SELECT token AS f0 FROM dlock.try_acquire('kinds:pin', '1h', 'f0', shared => true) \gset
SELECT token AS f1 FROM dlock.try_acquire('kinds:pin', '1h', 'f1', shared => true) \gset
BEGIN;
SELECT dlock.fence('kinds:pin', :f1) AS fenced_f1;
SELECT kind, name, token = :f1 AS f1_token, mode, granted FROM dlock.locks
 WHERE pid = pg_backend_pid() ORDER BY kind;
SELECT dlock.fence('kinds:pin', :f0) AS fenced_f0;
SELECT kind, name, token = :f1 AS f1_token, mode, granted FROM dlock.locks
 WHERE pid = pg_backend_pid() ORDER BY kind;
COMMIT;
SELECT count(*) AS locks_after_commit FROM dlock.locks WHERE pid = pg_backend_pid();
-- a false fence pins nothing
BEGIN;
SELECT dlock.release('kinds:pin', 'f1');
SELECT dlock.fence('kinds:pin', :f1) AS released_token;
SELECT count(*) AS pins FROM dlock.locks WHERE kind = 'pin' AND pid = pg_backend_pid();
COMMIT;

--
-- Lock-delay: a shared lease that expired in its lock-delay keeps an
-- exclusive lease from being granted, not another shared one
--
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:delay', '100ms', 'd', lock_delay => '1h', shared => true)) AS granted;
SELECT pg_sleep(0.2);
SELECT state, grantable_at > clock_timestamp() + interval '50min' AS in_delay
  FROM dlock.leases WHERE name = 'kinds:delay';
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:delay', '1h', 'x')) AS exclusive_refused;
\set VERBOSITY default
SELECT dlock.acquire('kinds:delay', '1h', 'x', timeout => '10ms');
\set VERBOSITY terse
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:delay', '1h', 's', shared => true)) AS shared_granted;
SELECT owner, state FROM dlock.leases WHERE name = 'kinds:delay' ORDER BY owner;

--
-- Transactions: a shared grant rolled back to a savepoint is undone, the
-- others stay; a prepared shared grant holds off no other reader, is not
-- live until COMMIT PREPARED, and keeps its lease when another backend
-- commits it
--
SELECT token AS t1 FROM dlock.try_acquire('kinds:tx', '1h', 't1', shared => true) \gset
BEGIN;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:tx', '1h', 't2', shared => true)) AS granted_t2;
SAVEPOINT s;
SELECT token AS t3 FROM dlock.try_acquire('kinds:tx', '1h', 't3', shared => true) \gset
SELECT dlock.fence('kinds:tx', :t3) AS t3_in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT dlock.fence('kinds:tx', :t3) AS t3_after_rollback;
COMMIT;
SELECT owner FROM dlock.leases WHERE name = 'kinds:tx' ORDER BY owner;
SELECT token > :t3 AS t3_not_reused FROM dlock.try_acquire('kinds:tx', '1h', 't4', shared => true);
SELECT dlock.release('kinds:tx', 't4');

BEGIN;
SELECT token AS tp FROM dlock.try_acquire('kinds:tx', '1h', 'tp', shared => true) \gset
PREPARE TRANSACTION 'kinds_2pc';
SELECT dlock.fence('kinds:tx', :tp) AS prepared_token;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:tx', '1h', 'tq', shared => true)) AS granted_while_prepared;
SELECT dlock.fence('kinds:tx', :t1) AS t1_still_live;
\c
COMMIT PREPARED 'kinds_2pc';
SELECT owner, state, shared FROM dlock.leases WHERE name = 'kinds:tx' AND state = 'live' ORDER BY owner;
SELECT dlock.fence('kinds:tx', :tp) AS committed_token;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:tx', '1h', 'tq', shared => true)) AS extended_after_commit;

--
-- The locks of shared grants and fences follow the transaction: a shared
-- grant rolled back to a savepoint gives back its claims and its name lock;
-- a fence's pin of a shared token outlives a rolled-back savepoint, passes
-- to a prepared transaction (an exclusive grant is refused meanwhile) and
-- ends with COMMIT PREPARED from another backend
--
SELECT token AS pr FROM dlock.try_acquire('kinds:pins', '1h', 'pr', shared => true) \gset
BEGIN;
SAVEPOINT s;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:pins', '1h', 'ps', shared => true)) AS granted_ps;
SELECT kind, mode FROM dlock.locks
 WHERE pid = pg_backend_pid() AND kind IN ('name', 'claim', 'pin') ORDER BY kind, mode;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS locks_after_rollback FROM dlock.locks
 WHERE pid = pg_backend_pid() AND kind IN ('name', 'claim', 'pin');
SAVEPOINT f;
SELECT dlock.fence('kinds:pins', :pr) AS fenced_pr;
ROLLBACK TO SAVEPOINT f;
SELECT kind, token = :pr AS pr_token, mode FROM dlock.locks
 WHERE pid = pg_backend_pid() AND kind IN ('name', 'claim', 'pin');
PREPARE TRANSACTION 'kinds_pin';
SELECT dlock.release('kinds:pins', 'pr');
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('kinds:pins', '1h', 'px')) AS exclusive_refused_while_prepared;
SELECT count(*) AS prepared_pins FROM dlock.locks WHERE kind = 'pin' AND token = :pr;
\c
COMMIT PREPARED 'kinds_pin';
SELECT count(*) AS pins_after_commit FROM dlock.locks WHERE kind = 'pin' AND token = :pr;
SELECT EXISTS (SELECT FROM dlock.try_acquire('kinds:pins', '1h', 'px')) AS exclusive_granted;

DELETE FROM dlock.lease_state WHERE name LIKE 'kinds:%';

-- The stand-in for pg_stat_force_next_flush() before PostgreSQL 15
DO $$
BEGIN
  IF to_regprocedure('public.pg_stat_force_next_flush()') IS NOT NULL THEN
    DROP FUNCTION public.pg_stat_force_next_flush();
  END IF;
END
$$;
