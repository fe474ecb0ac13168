--
-- The extension's life in one session.  dlock looks its relations up once
-- per backend and forgets them when they are invalidated: after DROP
-- EXTENSION and CREATE EXTENSION in the same session, calls use the new
-- relations, and without the extension they fail cleanly.
--
SELECT token > 0 AS granted FROM dlock.try_acquire('ext:a', '1h', 'w');
SELECT dlock.fence('ext:a', (SELECT token FROM dlock.leases WHERE name = 'ext:a')) AS fenced;

DROP EXTENSION dlock;
CREATE EXTENSION dlock;
-- The new extension's state is empty, and the counter starts over
SELECT count(*) AS leases FROM dlock.leases;
SELECT name, owner, token FROM dlock.try_acquire('ext:a', '1h', 'w2');
SELECT dlock.release('ext:a', 'w2') AS released;
SELECT name, token, state FROM dlock.leases;

-- The same within one transaction, and a rename of the table in between
BEGIN;
SELECT token FROM dlock.try_acquire('ext:b', '1h', 'w');
DROP EXTENSION dlock;
CREATE EXTENSION dlock;
SELECT token FROM dlock.try_acquire('ext:b', '1h', 'w');
COMMIT;
ALTER TABLE dlock.lease_state RENAME TO lease_state_moved;
SELECT dlock.try_acquire('ext:c', '1h', 'w');
ALTER TABLE dlock.lease_state_moved RENAME TO lease_state;
SELECT token FROM dlock.try_acquire('ext:c', '1h', 'w');

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
