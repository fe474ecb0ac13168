--
-- dlock.leases and the lease functions agree on every state: the view is
-- computed by dlock.lease_states(), which classifies rows with the same
-- code as try_acquire, renew, release and fence.  For each state, what the
-- view says (state, grantable_at) is checked against what the functions do
-- (another owner's try_acquire refused or granted, fence true or false).
--
\set VERBOSITY terse

-- Would another owner be granted the name now?  The attempt is rolled back,
-- so the lease stays as it was.  (Not in pg_temp: DISCARD ALL below.)
CREATE FUNCTION lease_state_grantable(n text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT FROM dlock.try_acquire(n, '1h', 'someone-else')) THEN
    RETURN false;
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = 'undo the grant';
EXCEPTION WHEN raise_exception THEN
  RETURN true;
END
$$;

-- The view, the functions, and 1.0's SQL reading of the table, row by row
CREATE VIEW lease_state_check AS
SELECT v.name,
       v.state,
       v.state = CASE WHEN s.ended_at IS NOT NULL THEN s.end_reason
                      WHEN s.session_bound AND NOT dlock.holder_alive(s.token) THEN 'session_ended'
                      WHEN s.expires_at <= clock_timestamp() THEN 'expired'
                      ELSE 'live' END AS state_as_1_0,
       v.grantable_at IS NOT DISTINCT FROM
         CASE v.state WHEN 'released' THEN s.ended_at
                      WHEN 'session_ended' THEN NULL
                      WHEN 'force_released' THEN s.ended_at + s.lock_delay
                      ELSE s.expires_at + s.lock_delay END AS grantable_at_as_1_0,
       v.state <> 'live' AND coalesce(v.grantable_at <= clock_timestamp(), true)
         AS view_says_grantable,
       lease_state_grantable(v.name) AS grantable,
       dlock.fence(v.name, v.token) AS fenced
  FROM dlock.leases v JOIN dlock.lease_state s USING (name)
 WHERE v.name LIKE 'ls:%';

--
-- live
--
SELECT EXISTS (SELECT FROM dlock.try_acquire('ls:live', '1h', 'o', lock_delay => '10min')) AS granted;
SELECT state, grantable_at = expires_at + interval '10min' AS grantable_after_expiry_and_delay,
       lock_delay, ended_at IS NULL AS not_ended
  FROM dlock.leases WHERE name = 'ls:live';
-- the same owner's re-acquire keeps it live, same token
SELECT token AS live_token FROM dlock.leases WHERE name = 'ls:live' \gset
SELECT token = :live_token AS same_token FROM dlock.try_acquire('ls:live', '1h', 'o');
SELECT * FROM lease_state_check WHERE name = 'ls:live';

--
-- expired: by a short ttl, and by moving the expiry back
--
SELECT EXISTS (SELECT FROM dlock.try_acquire('ls:expired', '10ms', 'o')) AS granted;
SELECT pg_sleep(0.05);
SELECT EXISTS (SELECT FROM dlock.try_acquire('ls:expired-delay', '1h', 'o', lock_delay => '1h')) AS granted;
SELECT EXISTS (SELECT FROM dlock.try_acquire('ls:expired-delay-over', '1h', 'o', lock_delay => '1h')) AS granted;
UPDATE dlock.lease_state SET expires_at = clock_timestamp() - interval '1min'
 WHERE name = 'ls:expired-delay';
UPDATE dlock.lease_state SET expires_at = clock_timestamp() - interval '2h'
 WHERE name = 'ls:expired-delay-over';
SELECT name, state, grantable_at > clock_timestamp() AS in_lock_delay
  FROM dlock.leases WHERE name LIKE 'ls:expired%' ORDER BY name;
-- an expired lease is not renewed or released
SELECT dlock.renew('ls:expired', 'o', '1h') IS NULL AS renew_refused,
       dlock.release('ls:expired', 'o') AS released;
SELECT * FROM lease_state_check WHERE name LIKE 'ls:expired%' ORDER BY name;

--
-- released: grantable at once, whatever the lock-delay
--
SELECT EXISTS (SELECT FROM dlock.try_acquire('ls:released', '1h', 'o', lock_delay => '1h')) AS granted;
SELECT dlock.release('ls:released', 'o');
SELECT state, grantable_at = ended_at AS grantable_since_release
  FROM dlock.leases WHERE name = 'ls:released';
SELECT * FROM lease_state_check WHERE name = 'ls:released';

--
-- force_released: in its lock-delay, then grantable once it has passed
--
SELECT EXISTS (SELECT FROM dlock.try_acquire('ls:forced', '1h', 'o', lock_delay => '1h')) AS granted;
SELECT dlock.force_release('ls:forced');
SELECT state, grantable_at = ended_at + lock_delay AS grantable_after_delay
  FROM dlock.leases WHERE name = 'ls:forced';
SELECT * FROM lease_state_check WHERE name = 'ls:forced';
SELECT EXISTS (SELECT FROM dlock.try_acquire('ls:forced-over', '1h', 'o', lock_delay => '1h')) AS granted;
SELECT dlock.force_release('ls:forced-over');
UPDATE dlock.lease_state SET ended_at = ended_at - interval '2h'
 WHERE name = 'ls:forced-over';
SELECT * FROM lease_state_check WHERE name = 'ls:forced-over';

--
-- session_ended: DISCARD ALL drops the session lock; free at once, whatever
-- the lock-delay, and no grantable_at
--
SELECT EXISTS (SELECT FROM dlock.try_acquire('ls:session', '1h', 'o', lock_delay => '1h',
                         session_bound => true)) AS granted;
SELECT state, holder_pid = pg_backend_pid() AS bound_here
  FROM dlock.leases WHERE name = 'ls:session';
SELECT * FROM lease_state_check WHERE name = 'ls:session';
DISCARD ALL;
SELECT state, grantable_at IS NULL AS no_grantable_at, session_bound
  FROM dlock.leases WHERE name = 'ls:session';
SELECT * FROM lease_state_check WHERE name = 'ls:session';

-- Every state at once: the view and the functions agree on each row
SELECT count(DISTINCT state) AS states,
       bool_and(state_as_1_0) AS states_as_1_0,
       bool_and(grantable_at_as_1_0) AS grantable_at_as_1_0,
       bool_and(grantable = view_says_grantable) AS grantability_agrees,
       bool_and(fenced = (state = 'live')) AS fence_agrees
  FROM lease_state_check;

-- The view is the function, column for column
SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type,
       a.attcollation::regcollation AS collation
  FROM pg_attribute a
 WHERE a.attrelid = 'dlock.leases'::regclass AND a.attnum > 0
 ORDER BY a.attnum;
SELECT (SELECT count(*) FROM dlock.leases) = (SELECT count(*) FROM dlock.lease_states())
         AS same_rows;

--
-- owner only for roles whose privileges the caller has
--
CREATE ROLE regress_ls_holder;
CREATE ROLE regress_ls_other;
CREATE ROLE regress_ls_member NOINHERIT IN ROLE regress_ls_holder;
SET ROLE regress_ls_holder;
SELECT EXISTS (SELECT FROM dlock.try_acquire('ls:role', '1h', 'holder-owner')) AS granted;
SELECT owner, holder_role, state FROM dlock.leases WHERE name = 'ls:role';
SET ROLE regress_ls_other;
SELECT owner, holder_role, state FROM dlock.leases WHERE name = 'ls:role';
SELECT owner, holder_role, state FROM dlock.lease_states() WHERE name = 'ls:role';
-- a member without the role's privileges sees no owner either
SET ROLE regress_ls_member;
SELECT owner, holder_role, state FROM dlock.leases WHERE name = 'ls:role';
RESET ROLE;
GRANT regress_ls_holder TO regress_ls_other;
SET ROLE regress_ls_other;
SELECT owner, holder_role, state FROM dlock.leases WHERE name = 'ls:role';
RESET ROLE;
SELECT dlock.force_release('ls:role');

DROP VIEW lease_state_check;
DROP FUNCTION lease_state_grantable(text);
DROP ROLE regress_ls_member;
DROP ROLE regress_ls_other;
DROP ROLE regress_ls_holder;
