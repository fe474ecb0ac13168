--
-- The extension's life in one session.  dlock looks its relations up once
-- per backend and forgets them when they are invalidated: after DROP
-- EXTENSION and CREATE EXTENSION in the same session, calls use the new
-- relations, and without the extension they fail cleanly.
--
SELECT token > 0 AS granted FROM dlock.try_acquire('ext:a', '1h', 'w');
SELECT dlock.fence('ext:a', (SELECT token FROM dlock.leases WHERE name = 'ext:a')) AS fenced;
-- the last token the extension handed out, to compare the new one's with
SELECT last_value AS dropped_last FROM dlock.token_seq \gset

DROP EXTENSION dlock;
CREATE EXTENSION dlock;
-- The new extension's state is empty.  Its counter is new, which makes a new
-- incarnation of the database (docs/internals.md, I1): the first grant moves
-- the counter up to the server's clock, above every token of the dropped
-- extension (which came from a counter moved to the clock earlier, and
-- counted up by one per grant since)
SELECT count(*) AS leases FROM dlock.leases;
SELECT name, owner, token > :dropped_last AS above_dropped FROM dlock.try_acquire('ext:a', '1h', 'w2');
SELECT dlock.release('ext:a', 'w2') AS released;
-- the view shows that grant: the counter's last token
SELECT name, token = (SELECT last_value FROM dlock.token_seq) AS last_granted, state FROM dlock.leases;

-- The same within one transaction, and a rename of the table in between
BEGIN;
SELECT token AS dropped_b FROM dlock.try_acquire('ext:b', '1h', 'w') \gset
DROP EXTENSION dlock;
CREATE EXTENSION dlock;
SELECT token > :dropped_b AS above_dropped FROM dlock.try_acquire('ext:b', '1h', 'w');
COMMIT;
ALTER TABLE dlock.lease_state RENAME TO lease_state_moved;
SELECT dlock.try_acquire('ext:c', '1h', 'w');
ALTER TABLE dlock.lease_state_moved RENAME TO lease_state;
-- the failed call drew no token: the next one follows ext:b's
SELECT token - (SELECT token FROM dlock.leases WHERE name = 'ext:b') AS after_ext_b
  FROM dlock.try_acquire('ext:c', '1h', 'w');

-- fence() answers do not outlive the state they were about: after DROP and
-- CREATE EXTENSION in one transaction, a token of the dropped state fences
-- false
BEGIN;
SELECT token AS dropped_token FROM dlock.try_acquire('ext:f', '1h', 'w') \gset
SELECT dlock.fence('ext:f', :dropped_token) AS fenced;
DROP EXTENSION dlock;
CREATE EXTENSION dlock;
SELECT dlock.fence('ext:f', :dropped_token) AS fenced_after_recreate;
COMMIT;
