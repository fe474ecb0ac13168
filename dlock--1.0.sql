/* dlock--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION dlock" to load this file. \quit

-- The schema dlock is created by CREATE EXTENSION (dlock.control names it).
-- Every role may call the functions; the tables stay private.
GRANT USAGE ON SCHEMA dlock TO PUBLIC;

--
-- Token counter.  One counter for the whole database, so tokens grow per
-- name and also across names.  Only dlock's functions advance it.
--
CREATE SEQUENCE dlock.token_seq AS bigint MINVALUE 1 NO CYCLE;
COMMENT ON SEQUENCE dlock.token_seq IS
  'Source of fencing tokens; dumped with the database so tokens keep growing after a restore.';
REVOKE ALL ON SEQUENCE dlock.token_seq FROM PUBLIC;

--
-- Lease state: one row per name ever granted.  An ended lease keeps its row
-- (marked by ended_at), so a name's row is updated in place.  Only the name
-- is indexed, which keeps those updates HOT; fillfactor leaves them room.
-- Written only by dlock's C functions, which read it in its latest committed
-- state, never through the caller's snapshot.
--
CREATE TABLE dlock.lease_state (
  name        text COLLATE "C" PRIMARY KEY,
  token       bigint NOT NULL,
  owner       text NOT NULL,
  holder_role regrole NOT NULL,
  acquired_at timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  ended_at    timestamptz,
  end_reason  text,
  lock_delay  interval NOT NULL,
  session_bound boolean NOT NULL,
  holder_pid  integer
) WITH (fillfactor = 50);
COMMENT ON TABLE dlock.lease_state IS
  'Lease of each name: token, owner, holder role, expiry, lock-delay, session binding; ended_at/end_reason once released or force-released. Read dlock.leases instead.';
REVOKE ALL ON TABLE dlock.lease_state FROM PUBLIC;

-- pg_dump carries the leases and the counter
SELECT pg_catalog.pg_extension_config_dump('dlock.lease_state', '');
SELECT pg_catalog.pg_extension_config_dump('dlock.token_seq', '');

--
-- dlock.lease: what a grant returns
--
CREATE TYPE dlock.lease AS (
  name       text,
  owner      text,
  token      bigint,
  expires_at timestamptz
);
COMMENT ON TYPE dlock.lease IS
  'A granted lease: the name, the owner that holds it, its fencing token and its expiry on the server''s clock.';

--
-- Functions.  They are written in C and resolve nothing through search_path;
-- the ones that change leases also pin search_path, as a second guard.
-- dlock.fence() does not, because it runs once per row of a guarded UPDATE
-- and a SET clause would cost a settings save and restore per call.
--
CREATE FUNCTION dlock.try_acquire(name text, ttl interval, owner text DEFAULT NULL,
                                  lock_delay interval DEFAULT NULL,
                                  session_bound boolean DEFAULT false)
RETURNS dlock.lease
AS 'MODULE_PATHNAME', 'dlock_try_acquire'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION dlock.try_acquire(text, interval, text, interval, boolean) IS
  'Grants a lease of name for ttl at once, or returns NULL when another owner holds it, it is being changed, it is in its lock-delay, or others wait for it; never blocks. NULL owner: the server generates one. lock_delay NULL: dlock.default_lock_delay.';

CREATE FUNCTION dlock.acquire(name text, ttl interval, owner text DEFAULT NULL,
                              timeout interval DEFAULT NULL,
                              lock_delay interval DEFAULT NULL,
                              session_bound boolean DEFAULT false)
RETURNS dlock.lease
AS 'MODULE_PATHNAME', 'dlock_acquire'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION dlock.acquire(text, interval, text, interval, interval, boolean) IS
  'Grants a lease of name for ttl, waiting in arrival order until it is free; timeout NULL waits until cancelled, 0 does not wait; raises 55P03 when the timeout passes.';

CREATE FUNCTION dlock.renew(name text, owner text, ttl interval)
RETURNS dlock.lease
AS 'MODULE_PATHNAME', 'dlock_renew'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION dlock.renew(text, text, interval) IS
  'Extends a live lease held by owner to ttl from now, same token; NULL when owner does not hold a live lease.';

CREATE FUNCTION dlock.release(name text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dlock_release'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION dlock.release(text, text) IS
  'Ends the lease of name if owner holds it live (compare-and-release); false otherwise. A transaction that changes nothing else commits without waiting for its WAL flush (dlock.lazy_release).';

CREATE FUNCTION dlock.force_release(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dlock_force_release'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION dlock.force_release(text) IS
  'Ends the live lease of name whoever holds it, for a role with the privileges of the holder''s role; false when there is none. The old token fails dlock.fence() from then on.';

CREATE FUNCTION dlock.fence(name text, token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dlock_fence'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION dlock.fence(text, bigint) IS
  'True iff token is the current live grant of name. Once true, no new grant of name can commit until this transaction ends. Put it in the WHERE clause of the writes the lease guards.';

CREATE FUNCTION dlock.holder_alive(token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dlock_holder_alive'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION dlock.holder_alive(bigint) IS
  'Whether the backend bound to the session-bound lease with this token still runs (true on a standby, where that is not known). Used by dlock.leases.';

--
-- dlock.leases: every name's lease, with its state on the server's clock.
-- owner is shown only for leases whose holder role the caller may act for.
--
CREATE VIEW dlock.leases AS
SELECT s.name,
       s.token,
       CASE WHEN pg_catalog.pg_has_role(s.holder_role, 'USAGE')
            THEN s.owner END AS owner,
       s.holder_role,
       s.acquired_at,
       s.expires_at,
       st.state,
       s.ended_at,
       CASE st.state
            WHEN 'released' THEN s.ended_at
            WHEN 'session_ended' THEN NULL
            WHEN 'force_released' THEN s.ended_at + s.lock_delay
            ELSE s.expires_at + s.lock_delay END AS grantable_at,
       s.lock_delay,
       s.session_bound,
       s.holder_pid
  FROM dlock.lease_state s,
       LATERAL (SELECT CASE
                  WHEN s.ended_at IS NOT NULL THEN s.end_reason
                  WHEN s.session_bound AND NOT dlock.holder_alive(s.token) THEN 'session_ended'
                  WHEN s.expires_at <= pg_catalog.clock_timestamp() THEN 'expired'
                  ELSE 'live' END AS state) st;
COMMENT ON VIEW dlock.leases IS
  'Leases by name. state: live, expired, released, force_released or session_ended. grantable_at: when the name can next be granted without a release (NULL: now).';
GRANT SELECT ON dlock.leases TO PUBLIC;
