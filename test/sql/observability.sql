--
-- Observability without shared_preload_libraries: dlock.locks works,
-- dlock.stats refuses with 55000 instead of showing nothing, the settings
-- exist (dlock.stats_max only when preloaded), and the stale-fence log line
-- is limited per backend.  The statistics themselves, the wording
-- of the stale-fence log line and two-session views of dlock.locks are in
-- test/t/014_stats.pl.
--
CREATE FUNCTION pg_temp.outcome(call text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE 'SELECT ' || call;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- Not preloaded: the statistics say how to get them
SELECT * FROM dlock.stats;
SELECT call, pg_temp.outcome(call) FROM (VALUES
  ('* FROM dlock.stats()'),
  ('dlock.stats_reset()'),
  ('* FROM dlock.queue_places()')) v(call);
SHOW dlock.stats;
SHOW dlock.log_stale_fences;

-- Only superusers may reset the statistics, or roles granted EXECUTE
CREATE ROLE regress_dlock_observer;
SET ROLE regress_dlock_observer;
SELECT pg_temp.outcome('dlock.stats_reset()');
SELECT count(*) AS visible_lock_rows FROM dlock.locks;
RESET ROLE;
DROP ROLE regress_dlock_observer;
-- ... and only superusers may change what is counted and logged
SELECT name, context FROM pg_settings WHERE name IN ('dlock.stats', 'dlock.log_stale_fences') ORDER BY name;

-- name_key() is the key pg_locks shows for a name: classid and objid are
-- its high and low 32 bits
BEGIN;
SELECT token AS obs_token FROM dlock.try_acquire('obs:a', '1h', 'w') \gset
SELECT (l.classid::bigint << 32 | l.objid::bigint) = dlock.name_key('obs:a') AS key_matches
  FROM pg_locks l
 WHERE l.locktype = 'advisory' AND l.objsubid = 17484 AND l.pid = pg_backend_pid();
-- A grant holds the name's lock until commit; the transaction sees its own row
SELECT kind, name, token, mode, granted, waitstart FROM dlock.locks
 WHERE pid = pg_backend_pid() ORDER BY kind, mode;
COMMIT;
SELECT count(*) AS locks_after_commit FROM dlock.locks WHERE pid = pg_backend_pid();

-- A true fence: AccessShareLock on the name, named; a false one holds nothing
BEGIN;
SELECT dlock.fence('obs:a', :obs_token) AS fenced;
SELECT dlock.fence('obs:a', :obs_token + 1000) AS stale;
SELECT kind, name, mode, granted FROM dlock.locks WHERE pid = pg_backend_pid();
COMMIT;

-- A session-bound holder: its session lock, found by its token
SELECT token AS sb_token FROM dlock.try_acquire('obs:session', '1h', 'w', session_bound => true) \gset
SELECT kind, name, token = :sb_token AS own_token, mode, granted FROM dlock.locks
 WHERE pid = pg_backend_pid();
SELECT dlock.release('obs:session', 'w');
SELECT count(*) AS locks_after_release FROM dlock.locks WHERE pid = pg_backend_pid();

-- Other advisory locks are not dlock's
SELECT pg_advisory_lock(17484);
SELECT pg_advisory_lock(1, 17485);
SELECT count(*) AS dlock_rows FROM dlock.locks WHERE pid = pg_backend_pid();
SELECT pg_advisory_unlock_all();

-- Not preloaded, the stale-fence log line is limited per backend: one line
-- per name in 10 s, however many stale checks, and none for a name never
-- granted (its wording, in the server log, is checked in test/t/014_stats.pl)
SELECT token AS obs_stale FROM dlock.try_acquire('obs:stale', '1h', 'w') \gset
SELECT dlock.force_release('obs:stale');
SET client_min_messages = log;
\set VERBOSITY sqlstate
SELECT dlock.fence('obs:stale', :obs_stale) AS first_check;
SELECT dlock.fence('obs:stale', :obs_stale) AS second_check;
SELECT dlock.fence('obs:never', :obs_stale) AS never_granted;
\set VERBOSITY default
RESET client_min_messages;

SELECT dlock.release('obs:a', 'w');
DELETE FROM dlock.lease_state WHERE name LIKE 'obs:%';
