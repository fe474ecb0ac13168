/*
 * dlock.sql - the SQL edition of dlock, for PostgreSQL services that load
 * no C library (RDS, Aurora, Cloud SQL, AlloyDB, Azure, Supabase, Neon,
 * Crunchy Bridge, ...).
 *
 * Install, as a role that owns the database (no superuser needed):
 *
 *     psql -v ON_ERROR_STOP=1 -d app -f sql-edition/dlock.sql
 *
 * It makes schema dlock with the functions, argument names, defaults,
 * results and SQLSTATEs of the C edition at version 1.3, written in SQL and
 * PL/pgSQL.  What the C edition does with shared memory or C hooks raises
 * 0A000 here, naming the C edition; sql-edition/README.md lists every
 * difference and why, and how the five modes of a name's lock are made of
 * transaction-level advisory locks with the C edition's conflict matrix.
 *
 * The whole script is one transaction: it installs everything or nothing.
 * It refuses a database where schema dlock exists (a second install) or
 * where extension dlock, the C edition, is installed.
 *
 * Copyright (c) 2026, dlock developers
 */

-- (A script that includes this one inside its own transaction sets the
-- psql variable dlock_inside_transaction first.)
\if :{?dlock_inside_transaction}
\else
BEGIN;
SET LOCAL search_path = pg_catalog, pg_temp;
SET LOCAL client_min_messages = warning;
SET LOCAL check_function_bodies = on;
\endif

DO $guard$
BEGIN
  IF pg_catalog.current_setting('server_version_num')::int < 130000 THEN
    RAISE EXCEPTION USING
      ERRCODE = 'feature_not_supported',
      MESSAGE = 'the SQL edition of dlock needs PostgreSQL 13 or later';
  END IF;
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'dlock') THEN
    RAISE EXCEPTION USING
      ERRCODE = 'duplicate_object',
      MESSAGE = 'extension dlock, the C edition of dlock, is installed in this database',
      DETAIL = 'The SQL edition would use the same schema, dlock, and its leases would not be those of the extension.',
      HINT = 'Keep the C edition; or DROP EXTENSION dlock (every lease ends) before installing the SQL edition.';
  END IF;
  IF EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = 'dlock') THEN
    RAISE EXCEPTION USING
      ERRCODE = 'duplicate_schema',
      MESSAGE = 'schema dlock already exists',
      DETAIL = CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_class c
                                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                                 WHERE n.nspname = 'dlock' AND c.relname = 'lease_state')
                    THEN 'The SQL edition of dlock is installed already: installing it again would end every lease.'
                    ELSE 'The SQL edition of dlock makes schema dlock itself, so that no one else can have objects in it.' END,
      HINT = 'To start over, DROP SCHEMA dlock CASCADE (every lease ends), then run this script again.';
  END IF;
END
$guard$;
\if :ERROR
\quit
\endif

CREATE SCHEMA dlock;
COMMENT ON SCHEMA dlock IS
  'dlock 1.3, SQL edition: leased, fenced locks (sql-edition/dlock.sql)';
REVOKE ALL ON SCHEMA dlock FROM PUBLIC;
GRANT USAGE ON SCHEMA dlock TO PUBLIC;

--
-- State: the shape of the C edition's tables at 1.3
--
CREATE SEQUENCE dlock.token_seq AS bigint MINVALUE 1 NO CYCLE;
COMMENT ON SEQUENCE dlock.token_seq IS
  'Source of fencing tokens; dumped with the database so tokens keep growing after a restore.';

CREATE SEQUENCE dlock.token_incarnation AS bigint MINVALUE 0 START 0 NO CYCLE;
COMMENT ON SEQUENCE dlock.token_incarnation IS
  'A hash of the incarnation of this database (system identifier, timeline, server start, database and counter) that last moved dlock.token_seq up to the clock. Written by dlock''s functions only.';

-- The role that holds a lease.  A domain over regrole: it reads and prints
-- a role by name, and "-" for no role, as the C edition's type does (a
-- dropped role prints as its OID, which no role has).
CREATE DOMAIN dlock.holder AS pg_catalog.regrole;
COMMENT ON DOMAIN dlock.holder IS
  'The role that holds a lease (regrole): its name, or "-" for no role.';

-- Its comparisons, as of the OIDs, under the C edition's operator names
CREATE FUNCTION dlock.holder_eq(dlock.holder, dlock.holder) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT $1::pg_catalog.oid OPERATOR(pg_catalog.=) $2::pg_catalog.oid $$;
CREATE FUNCTION dlock.holder_ne(dlock.holder, dlock.holder) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT $1::pg_catalog.oid OPERATOR(pg_catalog.<>) $2::pg_catalog.oid $$;
CREATE OPERATOR dlock.= (
  LEFTARG = dlock.holder, RIGHTARG = dlock.holder, FUNCTION = dlock.holder_eq,
  COMMUTATOR = OPERATOR(dlock.=), NEGATOR = OPERATOR(dlock.<>),
  RESTRICT = pg_catalog.eqsel, JOIN = pg_catalog.eqjoinsel
);
CREATE OPERATOR dlock.<> (
  LEFTARG = dlock.holder, RIGHTARG = dlock.holder, FUNCTION = dlock.holder_ne,
  COMMUTATOR = OPERATOR(dlock.<>), NEGATOR = OPERATOR(dlock.=),
  RESTRICT = pg_catalog.neqsel, JOIN = pg_catalog.neqjoinsel
);

CREATE TABLE dlock.lease_state (
  name          text COLLATE "C",
  token         bigint NOT NULL,
  owner         text NOT NULL,
  holder_role   dlock.holder NOT NULL,
  acquired_at   timestamptz NOT NULL,
  expires_at    timestamptz NOT NULL,
  ended_at      timestamptz,
  end_reason    text,
  lock_delay    interval NOT NULL,
  session_bound boolean NOT NULL,
  holder_pid    integer,
  value         text,
  slot          integer NOT NULL DEFAULT 0,
  shared        boolean NOT NULL DEFAULT false,
  max_holders   integer NOT NULL DEFAULT 1,
  CONSTRAINT lease_state_pkey PRIMARY KEY (name, slot)
) WITH (fillfactor = 50);
COMMENT ON TABLE dlock.lease_state IS
  'Lease of each name and holder slot: token, owner, holder role, expiry, lock-delay, session binding, value, kind; ended_at/end_reason once released or force-released. Read dlock.leases instead.';

REVOKE ALL ON TABLE dlock.lease_state FROM PUBLIC;
REVOKE ALL ON SEQUENCE dlock.token_seq FROM PUBLIC;
REVOKE ALL ON SEQUENCE dlock.token_incarnation FROM PUBLIC;

CREATE TYPE dlock.lease AS (
  name       text,
  owner      text,
  token      bigint,
  expires_at timestamptz
);
COMMENT ON TYPE dlock.lease IS
  'A granted lease: the name, the owner that holds it, its fencing token and its expiry on the server''s clock.';

--
-- Internal types: a request, and the plan of a write that a decision made
--
CREATE TYPE dlock._req AS (
  name          text,
  h             bigint,          -- dlock.name_key(name)
  owner         text,
  generated     boolean,         -- owner NULL: generated here
  ttl_us        bigint,
  lock_delay_us bigint,
  session_bound boolean,
  value         text,
  shared        boolean,
  max_holders   integer
);

CREATE TYPE dlock._plan AS (
  outcome       text,            -- done, held, delayed, busy, queued
  action        text,            -- extend or grant (outcome done)
  slot          integer,
  found         boolean,         -- the slot has a row
  token         bigint,          -- extend: the lease's token
  now           timestamptz,     -- the clock of the decision
  until         timestamptz,     -- held/delayed: no change before, but by a release
  session_token bigint,          -- held by a live session-bound lease
  busy_key      bigint,          -- busy: the lock to wait for alone
  busy_x        boolean
);

CREATE TYPE dlock._decision AS (
  status        text,            -- free, live, delayed
  mine          integer,         -- index of the owner's own live row
  until         timestamptz,
  session_token bigint,
  cand_slot     integer[],       -- free: the slots the grant may write, lowest first
  cand_target   integer[]        -- ... and the index of each one's row (0: none)
);

--
-- Keys.  A name's locks are transaction-level advisory locks on 64-bit keys
-- (pg_locks: objsubid 1, classid/objid the key's halves): the name's hash
-- (dlock.name_key, the C edition's) mixed by exclusive-or with one constant
-- per kind of lock.  sql-edition/README.md has the mapping of the C
-- edition's five modes onto three of these keys.
--
CREATE FUNCTION dlock.name_key(name text)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.hashtextextended($1 COLLATE pg_catalog."C", 431315968875) $$;
COMMENT ON FUNCTION dlock.name_key(text) IS
  'The 64-bit hash of lease name that its locks are keyed by (the C edition''s key of its lock tag).';

-- The constants, in one place; dlock.locks reads them back
CREATE FUNCTION dlock._k(kind text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE
         WHEN $1 OPERATOR(pg_catalog.=) 'n1' THEN 7535459766080761307      -- name lock, key 1
         WHEN $1 OPERATOR(pg_catalog.=) 'n2' THEN 8259534687944693243      -- name lock, key 2
         WHEN $1 OPERATOR(pg_catalog.=) 'n3' THEN 5023963199803620857      -- name lock, key 3
         WHEN $1 OPERATOR(pg_catalog.=) 'queue' THEN 971293586498595353
         WHEN $1 OPERATOR(pg_catalog.=) 'watch' THEN -1700651332223788845
         WHEN $1 OPERATOR(pg_catalog.=) 'pin' THEN -502485852508795792     -- with a token
         WHEN $1 OPERATOR(pg_catalog.=) 'session' THEN 8299303475727964827 -- with a token
         WHEN $1 OPERATOR(pg_catalog.=) 'slot' THEN -8174484319268742552   -- with the name and slot << 24
         WHEN $1 OPERATOR(pg_catalog.=) 'owner' THEN -3567220138349022706  -- with the name and owner's hash
         WHEN $1 OPERATOR(pg_catalog.=) 'kind' THEN 4400081118686431192
         WHEN $1 OPERATOR(pg_catalog.=) 'epoch' THEN 5571145409553026444
       END::pg_catalog.int8
$$;

--
-- Settings.  Without the C module, dlock.* are placeholder settings that
-- any role may set; they are read with their C defaults and units.
--
-- An integer setting with a unit (unit_ms: milliseconds per unit), in
-- milliseconds; its range is min_units to INT_MAX units, as the C edition
-- defines it.  Placeholder settings are not checked when they are set, so
-- they are checked here, when they are used.
CREATE FUNCTION dlock._setting_ms(setting text, default_ms bigint, unit_ms bigint,
                                  min_units bigint DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
  v text := current_setting(setting, true);
  ms numeric;
BEGIN
  IF v IS NULL OR v = '' THEN
    RETURN default_ms;
  END IF;
  IF v ~ '^\s*[-+]?[0-9]{1,18}\s*$' THEN
    ms := v::numeric * unit_ms;
  ELSE
    BEGIN
      ms := extract(epoch FROM v::interval)::numeric * 1000;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR numeric_value_out_of_range
                   OR invalid_text_representation OR interval_field_overflow THEN
      ms := NULL;
    END;
  END IF;
  IF ms IS NULL OR ms < min_units * unit_ms OR ms > 2147483647::numeric * unit_ms THEN
    RAISE EXCEPTION USING
      ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('invalid value for parameter "%s": "%s"', setting, v),
      DETAIL = format('The value must be between %s and %s %s.', min_units, 2147483647,
                      CASE unit_ms WHEN 1 THEN 'ms' ELSE 's' END);
  END IF;
  RETURN round(ms)::bigint;
END
$$;
CREATE FUNCTION dlock._setting_on(setting text, default_on boolean)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
DECLARE
  v text := current_setting(setting, true);
BEGIN
  IF v IS NULL OR v = '' THEN
    RETURN default_on;
  ELSIF v IN ('on', 'off', 'true', 'false') THEN
    RETURN v::boolean;
  END IF;
  BEGIN
    RETURN v::boolean;
  EXCEPTION WHEN invalid_text_representation THEN
    RAISE EXCEPTION USING
      ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('parameter "%s" requires a Boolean value', setting);
  END;
END
$$;
-- dlock.max_ttl in seconds (default 1 day)
CREATE FUNCTION dlock._max_ttl_s()
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
  RETURN dlock._setting_ms('dlock.max_ttl', 86400000, 1000, 1) / 1000;
END
$$;
--
-- The caller.  The functions run as dlock's owner (SECURITY DEFINER), so
-- the role a lease is granted to, and whose privileges decide who may act
-- on it, is the caller's current role: the role set by SET ROLE, or else
-- the session's.
--
CREATE FUNCTION dlock._caller()
RETURNS oid
LANGUAGE plpgsql STABLE
AS $$
BEGIN
  RETURN pg_catalog.quote_ident(CASE pg_catalog.current_setting('role') WHEN 'none' THEN SESSION_USER::text
                                     ELSE pg_catalog.current_setting('role') END)::pg_catalog.regrole::pg_catalog.oid;
END
$$;-- Whether caller may act on leases of holder: has its privileges
-- (dlock.leases calls it with the caller's search_path: every operator
-- and function is named by schema)
CREATE FUNCTION dlock._may_act(holder oid, caller oid)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
  IF holder OPERATOR(pg_catalog.=) caller THEN
    RETURN true;
  END IF;
  IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) caller) THEN
    RETURN true;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) holder) THEN
    RETURN false;
  END IF;
  RETURN pg_catalog.pg_has_role(caller, holder, 'USAGE');
END
$$;
--
-- Session-bound holders: the backend that holds such a lease holds a
-- session-level advisory lock keyed by its token; it is alive while it
-- does.  Another backend probes the lock; this backend looks in pg_locks.
-- On a standby no holder is known, and every such lease counts as live
-- until its expiry.
--
CREATE FUNCTION dlock._alive(token bigint, pid integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  k pg_catalog.int8 := token OPERATOR(pg_catalog.#) 8299303475727964827;   -- dlock._k('session')
BEGIN
  IF pg_catalog.pg_is_in_recovery() THEN
    RETURN true;
  END IF;
  IF pid IS NULL OR pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid() THEN
    -- try and give back at once, in one expression: nothing can interrupt
    -- between the two
    IF NOT (SELECT CASE WHEN pg_catalog.pg_try_advisory_lock_shared(k)
                        THEN pg_catalog.pg_advisory_unlock_shared(k) ELSE false END) THEN
      RETURN true;
    END IF;
    IF pid IS NOT NULL THEN
      RETURN false;
    END IF;
  END IF;
  RETURN EXISTS (SELECT FROM pg_catalog.pg_locks l
                  WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
                    AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
                    AND l.objsubid OPERATOR(pg_catalog.=) 1
                    AND l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock' AND l.granted
                    AND l.database OPERATOR(pg_catalog.=)
                        (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                    AND l.classid OPERATOR(pg_catalog.=)
                        ((k OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
                    AND l.objid OPERATOR(pg_catalog.=)
                        (k OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid);
END
$$;
CREATE FUNCTION dlock.holder_alive(token bigint)
RETURNS boolean
LANGUAGE sql STRICT VOLATILE PARALLEL UNSAFE
AS $$ SELECT dlock._alive($1, NULL) $$;
COMMENT ON FUNCTION dlock.holder_alive(bigint) IS
  'Whether the backend bound to the session-bound lease with this token still runs (true on a standby, where that is not known).';

--
-- Argument checks (src/args.c): the same messages and SQLSTATEs.  They run
-- before anything is locked or written.
--
CREATE FUNCTION dlock._check_name(name text, what text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
  IF name IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
      MESSAGE = what || ' must not be null';
  END IF;
  IF name = '' THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = what || ' must not be empty';
  END IF;
  IF octet_length(name) > 1024 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = what || ' is too long',
      DETAIL = format('The name is %s bytes long; the limit is %s bytes.', octet_length(name), 1024);
  END IF;
  RETURN name;
END
$$;

-- An interval without a month part in microseconds, saturating.  The month
-- field (which holds the years too) is read from the binary form, here and
-- in the checks written out in the functions below: extract(month/year ...)
-- splits the whole interval into fields first, which before PostgreSQL 15
-- fails (22008) when the interval has more than 2^31 - 1 hours
CREATE FUNCTION dlock._interval_us(span interval, argname text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
  secs numeric;
BEGIN
  IF NOT isfinite(span) THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = argname || ' must be finite';
  END IF;
  IF substr(interval_send(span), 13) <> int4send(0) THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = argname || ' must not have a month or year part',
      DETAIL = format('Months have no fixed length; give the %s in days, hours, minutes or seconds.', argname);
  END IF;
  secs := extract(epoch FROM span)::numeric;
  IF secs * 1000000 > 9223372036854775807 THEN
    RETURN 9223372036854775807;
  ELSIF secs * 1000000 < -9223372036854775807 THEN
    RETURN -9223372036854775807;
  END IF;
  RETURN round(secs * 1000000)::bigint;
END
$$;

CREATE FUNCTION dlock._ttl_us(ttl interval)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
  us bigint;
  max_s bigint;
BEGIN
  IF ttl IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'ttl must not be null';
  END IF;
  us := dlock._interval_us(ttl, 'ttl');
  IF us <= 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = 'ttl must be positive';
  END IF;
  max_s := dlock._max_ttl_s();
  IF us > max_s * 1000000 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'ttl exceeds dlock.max_ttl',
      DETAIL = format('The longest allowed ttl is %s seconds.', max_s),
      HINT = 'Take a shorter ttl and renew the lease while it is needed.';
  END IF;
  RETURN us;
END
$$;

-- -1: no limit (NULL, or too long to represent)
CREATE FUNCTION dlock._timeout_us(timeout interval)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
  us bigint;
BEGIN
  IF timeout IS NULL THEN
    RETURN -1;
  END IF;
  us := dlock._interval_us(timeout, 'timeout');
  IF us = 9223372036854775807 THEN
    RETURN -1;
  END IF;
  IF us < 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'timeout must not be negative',
      HINT = 'Pass NULL to wait without a limit, or 0 not to wait.';
  END IF;
  RETURN us;
END
$$;

CREATE FUNCTION dlock._lock_delay_us(lock_delay interval)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
  us bigint;
  max_s bigint := dlock._max_ttl_s();
BEGIN
  IF lock_delay IS NULL THEN
    us := dlock._setting_ms('dlock.default_lock_delay', 0, 1) * 1000;
    IF us > max_s * 1000000 THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
        MESSAGE = 'dlock.default_lock_delay exceeds dlock.max_ttl',
        DETAIL = format('The longest allowed lock_delay is %s seconds.', max_s),
        HINT = 'Lower dlock.default_lock_delay, or pass lock_delay.';
    END IF;
    RETURN us;
  END IF;
  us := dlock._interval_us(lock_delay, 'lock_delay');
  IF us < 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'lock_delay must not be negative';
  END IF;
  IF us > max_s * 1000000 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'lock_delay exceeds dlock.max_ttl',
      DETAIL = format('The longest allowed lock_delay is %s seconds.', max_s);
  END IF;
  RETURN us;
END
$$;

-- The owner argument; NULL generates one when allowed (acquire)
CREATE FUNCTION dlock._owner(owner text, generate boolean)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF owner IS NULL AND generate THEN
    RETURN dlock._owner_prefix() || substr(replace(gen_random_uuid()::text, '-', ''), 1, 16);
  END IF;
  IF owner IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'owner must not be null';
  END IF;
  IF owner = '' THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'owner must not be empty',
      HINT = CASE WHEN generate THEN 'Pass NULL to have the server generate an owner.'
                  ELSE 'Pass the owner that the lease was acquired with.' END;
  END IF;
  IF octet_length(owner) > 256 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'owner is too long',
      DETAIL = format('The owner is %s bytes long; the limit is %s bytes.', octet_length(owner), 256);
  END IF;
  RETURN owner;
END
$$;

-- The first 16 hex digits of every owner this backend generates: they
-- name the backend (its pid and start), so that acquire() can tell a
-- lease it would wait for was granted to an owner generated here
CREATE FUNCTION dlock._owner_prefix()
RETURNS text
LANGUAGE sql STABLE
AS $$
SELECT substr(md5(pg_backend_pid()::text || ':' ||
                  coalesce((SELECT a.backend_start::text FROM pg_stat_activity a
                             WHERE a.pid = pg_backend_pid()), '') || ':' ||
                  pg_postmaster_start_time()::text), 1, 16)
$$;

CREATE FUNCTION dlock._value(value text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
  IF octet_length(value) > 1024 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'value is too long',
      DETAIL = format('The value is %s bytes long; the limit is %s bytes.', octet_length(value), 1024);
  END IF;
  RETURN value;
END
$$;

CREATE FUNCTION dlock._not_null(b boolean, argname text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
  IF b IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = argname || ' must not be null';
  END IF;
  RETURN b;
END
$$;

-- The request of try_acquire() and acquire(), checked in the C edition's order
CREATE FUNCTION dlock._request(name text, ttl interval, owner text, lock_delay interval,
                               session_bound boolean, value text, queue boolean,
                               shared boolean, max_holders integer)
RETURNS dlock._req
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  q dlock._req;
  secs numeric;
  max_s bigint := 86400;
BEGIN
  -- (the checks of the helpers above, written out: this runs on every grant)
  IF name IS NULL OR name = '' OR octet_length(name) > 1024 THEN
    PERFORM dlock._check_name(name, 'lease name');
  END IF;
  q.name := name;
  IF current_setting('dlock.max_ttl', true) <> '' THEN
    max_s := dlock._max_ttl_s();
  END IF;
  IF ttl IS NULL OR NOT isfinite(ttl) OR substr(interval_send(ttl), 13) <> int4send(0) THEN
    q.ttl_us := dlock._ttl_us(ttl);
  ELSE
    secs := extract(epoch FROM ttl);
    IF secs <= 0 OR secs > max_s THEN
      q.ttl_us := dlock._ttl_us(ttl);
    END IF;
    q.ttl_us := round(secs * 1000000);
  END IF;
  q.generated := owner IS NULL;
  IF owner IS NULL OR owner = '' OR octet_length(owner) > 256 THEN
    q.owner := dlock._owner(owner, true);
  ELSE
    q.owner := owner;
  END IF;
  IF lock_delay IS NULL AND coalesce(current_setting('dlock.default_lock_delay', true), '') = '' THEN
    q.lock_delay_us := 0;
  ELSE
    q.lock_delay_us := dlock._lock_delay_us(lock_delay);
  END IF;
  IF session_bound IS NULL THEN
    PERFORM dlock._not_null(session_bound, 'session_bound');
  END IF;
  q.session_bound := session_bound;
  IF q.session_bound AND NOT dlock._setting_on('dlock.allow_session_bound', true) THEN
    RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
      MESSAGE = 'session-bound leases are not allowed here',
      DETAIL = 'dlock.allow_session_bound is off.',
      HINT = 'Behind a transaction pooler a backend outlives its clients and is closed or reset by the pooler: take a lease with a ttl and renew it.';
  END IF;
  IF octet_length(value) > 1024 THEN
    PERFORM dlock._value(value);
  END IF;
  q.value := value;
  IF queue IS NULL THEN
    PERFORM dlock._not_null(queue, 'queue');
  END IF;
  IF queue THEN
    RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
      MESSAGE = 'queue => true needs the C edition of dlock',
      DETAIL = 'Places in a queue are kept in shared memory between calls, which the SQL edition of dlock has none of.',
      HINT = 'Wait with dlock.acquire(), or install the C edition (CREATE EXTENSION dlock) with dlock in shared_preload_libraries.';
  END IF;
  IF shared IS NULL THEN
    PERFORM dlock._not_null(shared, 'shared');
  END IF;
  q.shared := shared;
  IF max_holders IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'max_holders must not be null';
  END IF;
  IF max_holders < 1 OR max_holders > 1000 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('max_holders must be between 1 and %s', 1000);
  END IF;
  IF q.shared AND max_holders > 1 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'a shared lease cannot have max_holders',
      DETAIL = 'Shared leases of a name are not counted; max_holders > 1 asks for a permit of a counting semaphore.',
      HINT = 'Pass either shared => true or max_holders.';
  END IF;
  q.max_holders := max_holders;
  q.h := dlock.name_key(q.name);
  RETURN q;
END
$$;
-- The names of the *_all functions: checked, distinct, in the canonical
-- order (the name's key as an unsigned number, then its bytes)
CREATE FUNCTION dlock._names(names text[])
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
  i integer := 0;
  n text;
  result text[];
BEGIN
  IF names IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'names must not be null';
  END IF;
  IF array_ndims(names) > 1 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = 'names must be a one-dimensional array';
  END IF;
  IF coalesce(cardinality(names), 0) = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = 'names must not be empty';
  END IF;
  FOREACH n IN ARRAY names LOOP
    i := i + 1;
    IF n IS NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
        MESSAGE = 'names must not contain nulls',
        DETAIL = format('Element %s is null.', i);
    END IF;
    PERFORM dlock._check_name(n, 'lease name ' || i);
  END LOOP;
  SELECT array_agg(u.n ORDER BY dlock.name_key(u.n) # (-9223372036854775808)::bigint, u.n COLLATE "C")
    INTO result
    FROM (SELECT DISTINCT x COLLATE "C" AS n FROM unnest(names) x) u;
  IF cardinality(result) > 64 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'too many names',
      DETAIL = format('%s distinct names were given; the limit is %s.', cardinality(result), 64);
  END IF;
  RETURN result;
END
$$;

-- Leases change only on a writable primary
CREATE FUNCTION dlock._writable(funcname text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF pg_is_in_recovery() THEN
    RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
      MESSAGE = 'cannot change leases during recovery',
      DETAIL = format('%s() changes a lease, and this server is a standby.', funcname),
      HINT = format('Call %s() on the primary server; dlock.leases and dlock.fence() work on a standby.', funcname);
  END IF;
  IF current_setting('transaction_read_only')::boolean THEN
    RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
      MESSAGE = format('cannot execute %s() in a read-only transaction', funcname);
  END IF;
END
$$;

-- The deadline of a wait: NULL without limit, -infinity not at all; the
-- caller's lock_timeout bounds the whole wait too (dlock.acquire)
CREATE FUNCTION dlock._deadline(timeout_us bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  now timestamptz := clock_timestamp();
  lt bigint := dlock._setting_ms('lock_timeout', 0, 1);
  deadline timestamptz;
BEGIN
  IF timeout_us = 0 THEN
    RETURN '-infinity';
  END IF;
  IF timeout_us > 0 AND timeout_us < 3153600000000000 THEN   -- below 100 years
    deadline := now + make_interval(secs => timeout_us / 1000000.0);
  END IF;
  IF lt > 0 THEN
    deadline := least(coalesce(deadline, 'infinity'), now + make_interval(secs => lt / 1000.0));
  END IF;
  RETURN deadline;
END
$$;

--
-- The lease state model (src/lease_status.c): what a row means at a given
-- moment.  status: free (grantable now), live (held until until) or
-- delayed (in its lock-delay until until).
--
CREATE TYPE dlock._class AS (
  state        text,             -- live, expired, released, force_released, session_ended
  status       text,             -- free, live, delayed
  until        timestamptz,
  grantable_at timestamptz       -- NULL for session_ended
);

-- t + d, where a day is 24 hours, saturating at infinity
CREATE FUNCTION dlock._after(t timestamptz, d interval)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
AS $$
SELECT CASE WHEN d OPERATOR(pg_catalog.=) '0'::pg_catalog.interval OR NOT pg_catalog.isfinite(t) THEN t
            WHEN t OPERATOR(pg_catalog.>) '100000-01-01 00:00+00'::pg_catalog.timestamptz
              THEN 'infinity'::pg_catalog.timestamptz
            ELSE t OPERATOR(pg_catalog.+)
                 pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', d)) END
$$;

-- (dlock.leases calls it with the caller's search_path: every operator
-- and function is named by schema)
CREATE FUNCTION dlock._classify(r dlock.lease_state, now timestamptz)
RETURNS dlock._class
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  c dlock._class;
  ended pg_catalog.timestamptz;
BEGIN
  c.status := 'free';
  IF r.ended_at IS NOT NULL THEN
    IF r.end_reason IS NULL OR r.end_reason OPERATOR(pg_catalog.=) 'released' THEN
      c.state := 'released';
      c.grantable_at := r.ended_at;
      RETURN c;
    END IF;
    c.state := 'force_released';
    ended := r.ended_at;
  ELSIF r.session_bound AND NOT dlock._alive(r.token, r.holder_pid) THEN
    c.state := 'session_ended';
    RETURN c;
  ELSE
    IF r.expires_at OPERATOR(pg_catalog.>) now THEN
      c.state := 'live';
    ELSE
      c.state := 'expired';
    END IF;
    ended := r.expires_at;
  END IF;
  c.grantable_at := dlock._after(ended, r.lock_delay);
  IF c.state OPERATOR(pg_catalog.=) 'live' THEN
    c.status := 'live';
    c.until := r.expires_at;
  ELSIF r.lock_delay OPERATOR(pg_catalog.>) '0'::pg_catalog.interval
        AND now OPERATOR(pg_catalog.<) c.grantable_at THEN
    c.status := 'delayed';
    c.until := c.grantable_at;
  END IF;
  RETURN c;
END
$$;

CREATE FUNCTION dlock._kind_text(shared boolean, max_holders integer)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
SELECT CASE WHEN shared THEN 'a shared lease'
            WHEN max_holders > 1 THEN 'a permit of a semaphore of ' || max_holders
            ELSE 'an exclusive lease' END
$$;

-- Whether a lease of the asked kind may be live beside one of the held
-- kind (lease_status.c, LeaseKindShares)
CREATE FUNCTION dlock._shares(held_shared boolean, held_max integer,
                              asked_shared boolean, asked_max integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
SELECT (asked_shared OR asked_max > 1) AND held_shared = asked_shared AND held_max = asked_max
$$;

-- The rows of a name, by slot, in their latest committed state (the
-- caller holds a lock that conflicts with every writer it decides
-- against).  Under REPEATABLE READ and SERIALIZABLE a function reads
-- through the transaction's snapshot: a row that changed since is
-- reported as a serialization failure rather than decided on.
CREATE FUNCTION dlock._rows(name text)
RETURNS dlock.lease_state[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  rows dlock.lease_state[];
BEGIN
  SELECT array_agg(s ORDER BY s.slot) INTO rows FROM dlock.lease_state s WHERE s.name = _rows.name;
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    PERFORM dlock._fresh(_rows.name);
  END IF;
  RETURN rows;
END
$$;

-- The status of a transaction by its 32-bit xid (as xmin and xmax show
-- it), one not older than 2^31 transactions
CREATE FUNCTION dlock._xid_status(x xid)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  nxt bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
  full_xid bigint := (nxt & ~4294967295::bigint) + x::text::bigint;
BEGIN
  IF full_xid > nxt THEN
    full_xid := full_xid - 4294967296;
  END IF;
  RETURN pg_xact_status(full_xid::text::xid8);
END
$$;

CREATE FUNCTION dlock._fresh(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  x xid;
BEGIN
  FOR x IN SELECT s.xmax FROM dlock.lease_state s
            WHERE s.name = _fresh.name AND s.xmax::text <> '0'
  LOOP
    IF dlock._xid_status(x) = 'committed' THEN
      RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
        MESSAGE = 'could not serialize access due to concurrent update',
        DETAIL = format('Lease "%s" changed after this transaction took its snapshot.', name),
        HINT = 'Retry the transaction; in REPEATABLE READ and SERIALIZABLE the SQL edition of dlock reads leases through the transaction''s snapshot.';
    END IF;
  END LOOP;
END
$$;

--
-- What a request of a kind by owner may do with the rows of a name
-- (lease_status.c, LeaseDecide): extend the owner's own live lease
-- (mine), be granted into one of the candidate slots (free), or wait
-- (live, delayed) until until.  A request that contradicts the live
-- leases is an error (22023).  Changes nothing.
--
CREATE FUNCTION dlock._decide(rows dlock.lease_state[], shared boolean, max_holders integer,
                              owner text, name text, now timestamptz, caller oid)
RETURNS dlock._decision
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  d dlock._decision;
  n integer := coalesce(array_length(rows, 1), 0);
  cap integer := CASE WHEN max_holders > 1 THEN max_holders WHEN shared THEN 1000 ELSE 1 END;
  excl boolean := NOT shared AND max_holders = 1;
  r dlock.lease_state;
  c dlock._class;
  st text[] := '{}';
  un timestamptz[] := '{}';
  occupied integer := 0;
  occupied_live boolean := false;
  blocked boolean := false;
  blocked_live boolean := false;
  all_end timestamptz := '-infinity';
  first_end timestamptz := 'infinity';
  i integer := 1;
  empty integer := 0;
BEGIN
  FOR j IN 1 .. n LOOP
    r := rows[j];
    c := dlock._classify(r, now);
    st[j] := c.status;
    un[j] := c.until;
    IF c.status = 'live' AND owner IS NOT NULL AND r.owner = owner
       AND dlock._may_act(r.holder_role, caller) THEN
      IF r.shared <> _decide.shared OR r.max_holders <> _decide.max_holders THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
          MESSAGE = format('owner "%s" already holds lease "%s" as another kind of lease', owner, name),
          DETAIL = format('It holds %s; the request is for %s.',
                          dlock._kind_text(r.shared, r.max_holders), dlock._kind_text(shared, max_holders)),
          HINT = 'Release the lease first, or ask for the kind it holds.';
      END IF;
      d.mine := j;
      d.status := 'live';
      d.until := r.expires_at;
      RETURN d;
    END IF;
  END LOOP;

  FOR j IN 1 .. n LOOP
    r := rows[j];
    CONTINUE WHEN st[j] = 'free';
    IF st[j] = 'live' AND r.max_holders <> _decide.max_holders THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
        MESSAGE = format('max_holders %s does not match the live leases of "%s"', max_holders, name),
        DETAIL = format('The live leases of "%s" have max_holders = %s.', name, r.max_holders),
        HINT = format('Ask with max_holders => %s, or wait until those leases have ended.', r.max_holders);
    END IF;
    IF excl OR r.shared <> _decide.shared OR r.max_holders <> _decide.max_holders THEN
      blocked := true;
      all_end := greatest(all_end, un[j]);
      IF st[j] = 'live' THEN
        blocked_live := true;
        IF r.session_bound THEN
          d.session_token := r.token;
        END IF;
      END IF;
    ELSE
      occupied := occupied + 1;
      occupied_live := occupied_live OR st[j] = 'live';
      first_end := least(first_end, un[j]);
    END IF;
  END LOOP;

  IF blocked THEN
    d.status := CASE WHEN blocked_live THEN 'live' ELSE 'delayed' END;
    d.until := all_end;
    RETURN d;
  END IF;
  IF occupied >= cap THEN
    d.status := CASE WHEN occupied_live THEN 'live' ELSE 'delayed' END;
    d.until := first_end;
    RETURN d;
  END IF;

  -- The slots below the limit whose row is free, and the lowest few that
  -- have no row, lowest first: the grant takes the first whose pin it can
  -- have
  d.status := 'free';
  d.cand_slot := '{}';
  d.cand_target := '{}';
  FOR slot IN 0 .. cap - 1 LOOP
    EXIT WHEN empty >= 4;
    WHILE i <= n AND rows[i].slot < slot LOOP
      i := i + 1;
    END LOOP;
    IF i <= n AND rows[i].slot = slot THEN
      IF st[i] = 'free' THEN
        d.cand_slot := d.cand_slot || slot;
        d.cand_target := d.cand_target || i;
      END IF;
    ELSE
      d.cand_slot := d.cand_slot || slot;
      d.cand_target := d.cand_target || 0;
      empty := empty + 1;
    END IF;
  END LOOP;
  RETURN d;
END
$$;

--
-- Locks.  Every lock of a decision is a transaction-level advisory lock; a
-- decision that changes nothing gives its locks back by rolling back the
-- PL/pgSQL block (a subtransaction) that took them.  A wait is a wait in
-- the lock manager, bounded by lock_timeout set to what is left of the
-- caller's deadline (NULL: no limit; -infinity: no wait).
--
CREATE FUNCTION dlock._lock(k bigint, x boolean, deadline timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  ms numeric;
  saved text;
BEGIN
  IF x THEN
    IF pg_try_advisory_xact_lock(k) THEN
      RETURN true;
    END IF;
  ELSIF pg_try_advisory_xact_lock_shared(k) THEN
    RETURN true;
  END IF;
  IF deadline = '-infinity' THEN
    RETURN false;
  END IF;
  IF deadline IS NULL THEN
    IF x THEN
      PERFORM pg_advisory_xact_lock(k);
    ELSE
      PERFORM pg_advisory_xact_lock_shared(k);
    END IF;
    RETURN true;
  END IF;
  ms := ceil(extract(epoch FROM deadline - clock_timestamp()) * 1000);
  IF ms <= 0 THEN
    RETURN false;
  END IF;
  saved := current_setting('lock_timeout');
  BEGIN
    PERFORM set_config('lock_timeout', least(ms, 2147483647)::bigint::text, true);
    IF x THEN
      PERFORM pg_advisory_xact_lock(k);
    ELSE
      PERFORM pg_advisory_xact_lock_shared(k);
    END IF;
    PERFORM set_config('lock_timeout', saved, true);
    RETURN true;
  EXCEPTION WHEN lock_not_available THEN
    RETURN false;
  END;
END
$$;

-- Wait, within deadline, until nobody holds a lock that conflicts with k
-- in mode x, and hold nothing: false when not in time
CREATE FUNCTION dlock._wait_free(k bigint, x boolean, deadline timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF NOT dlock._lock(k, x, deadline) THEN
    RETURN false;
  END IF;
  RAISE SQLSTATE 'DLK91';
EXCEPTION WHEN SQLSTATE 'DLK91' THEN
  RETURN true;
END
$$;

-- The pin of a row: the name's lock in GRANT mode for slot 0 (key 1 in
-- exclusive mode, the others being held by the serialized grant), the
-- token's own lock for the other slots
CREATE FUNCTION dlock._pin_key(h bigint, slot integer, token bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
SELECT CASE WHEN slot = 0 THEN h # dlock._k('n1') ELSE token # dlock._k('pin') END
$$;

--
-- The five modes of a name's lock (dlock.h), each made of transaction-level
-- advisory locks on up to three keys of the name, taken in this order
-- (sql-edition/README.md says why the conflicts are exactly those of the C
-- edition's lock-manager modes; sql-edition/test/conflicts.sql checks it):
--
--    mode        C edition's mode          key n1     key n2     key n3
--    FENCE       AccessShareLock           shared
--    ALONGSIDE   RowExclusiveLock                     shared
--    CHANGE      ShareUpdateExclusiveLock                        exclusive
--    SERIAL      ShareRowExclusiveLock                exclusive  exclusive
--    GRANT       AccessExclusiveLock       exclusive  exclusive  exclusive
--
-- The functions below take these keys directly (the constants of
-- dlock._k('n1'), 'n2', 'n3'), in this order; dlock._mode_keys() is the
-- table above, for the test and for dlock.locks' readers.
--
CREATE FUNCTION dlock._mode_keys(mode text, OUT key text, OUT exclusive boolean)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
AS $$
SELECT k.key, k.exclusive
  FROM (VALUES ('FENCE', 1, 'n1', false),
               ('ALONGSIDE', 1, 'n2', false),
               ('CHANGE', 1, 'n3', true),
               ('SERIAL', 1, 'n2', true), ('SERIAL', 2, 'n3', true),
               ('GRANT', 1, 'n1', true), ('GRANT', 2, 'n2', true), ('GRANT', 3, 'n3', true))
       AS k(mode, ord, key, exclusive)
 WHERE k.mode = $1
 ORDER BY k.ord
$$;

--
-- The grant engine (src/grant.c).  Each attempt returns a plan: done (with
-- the locks the write needs held), or why not (and nothing held).
--

-- A shared lease or a permit granted alongside the grants of its kind
-- (ALONGSIDE); NULL when this way does not apply or cannot have what it
-- needs at once, and then the serialized way decides
CREATE FUNCTION dlock._attempt_alongside(q dlock._req, deadline timestamptz, caller oid)
RETURNS dlock._plan
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  p dlock._plan;
  rows dlock.lease_state[];
  again dlock.lease_state[];
  d dlock._decision;
  nc integer;
  c integer;
  v_slot integer;
  t integer;
  got integer;
  now timestamptz;
  there dlock.lease_state;
  free boolean;
BEGIN
  IF NOT q.shared AND q.max_holders = 1 THEN
    RETURN NULL;
  END IF;
  BEGIN
    IF NOT dlock._lock(q.h # dlock._k('n2'), false, deadline) THEN
      RAISE SQLSTATE 'DLK92';
    END IF;
    IF NOT pg_try_advisory_xact_lock(q.h # dlock._k('owner') # hashtextextended(q.owner, 431315968875)) THEN
      RAISE SQLSTATE 'DLK92';
    END IF;
    rows := dlock._rows(q.name);
    IF rows IS NULL THEN
      -- no rows: the first grants made alongside claim the name's kind
      IF q.shared THEN
        IF NOT pg_try_advisory_xact_lock_shared(q.h # dlock._k('kind')) THEN
          RAISE SQLSTATE 'DLK92';
        END IF;
      ELSIF NOT pg_try_advisory_xact_lock(q.h # dlock._k('kind')) THEN
        RAISE SQLSTATE 'DLK92';
      END IF;
      rows := dlock._rows(q.name);
    END IF;
    IF EXISTS (SELECT FROM unnest(rows) r WHERE r.shared <> q.shared OR r.max_holders <> q.max_holders) THEN
      RAISE SQLSTATE 'DLK92';
    END IF;
    now := clock_timestamp();
    d := dlock._decide(rows, q.shared, q.max_holders, q.owner, q.name, now, caller);
    IF d.mine IS NOT NULL OR d.status <> 'free' THEN
      RAISE SQLSTATE 'DLK92';
    END IF;
    nc := cardinality(d.cand_slot);
    FOR i IN 0 .. nc - 1 LOOP
      -- the decision's order, but slot 0 last: reusing its row needs the
      -- name's own lock, which the serialized way takes
      c := CASE WHEN d.cand_slot[1] <> 0 THEN i + 1
                WHEN i + 1 < nc THEN i + 2 ELSE 1 END;
      v_slot := d.cand_slot[c];
      t := d.cand_target[c];
      -- slot 0's pin is the name's own lock, which every grant and change
      -- in progress holds: its row is taken here without it only when its
      -- token was ended by a release or force_release of another
      -- transaction (never live again) and no other transaction has fenced
      -- the name, looked at once the row was read ended
      CONTINUE WHEN v_slot = 0 AND t > 0
                AND (rows[t].ended_at IS NULL
                     OR EXISTS (SELECT FROM pg_locks l
                                 WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                                   AND l.objsubid = 1 AND l.granted
                                   AND l.classid = (((q.h # dlock._k('n3')) >> 32) & 4294967295)::oid
                                   AND l.objid = ((q.h # dlock._k('n3')) & 4294967295)::oid));
      BEGIN
        IF NOT pg_try_advisory_xact_lock(q.h # dlock._k('slot') # (v_slot::bigint << 24)) THEN
          RAISE SQLSTATE 'DLK93';
        END IF;
        IF t > 0 AND v_slot <> 0 AND NOT pg_try_advisory_xact_lock(rows[t].token # dlock._k('pin')) THEN
          RAISE SQLSTATE 'DLK93';
        END IF;
        -- still free, now that nobody else can write it?
        again := dlock._rows(q.name);
        SELECT a.* INTO there FROM unnest(again) a WHERE a.slot = v_slot;
        IF t = 0 THEN
          free := NOT FOUND;
        ELSE
          free := FOUND AND there.token = rows[t].token
                  AND (dlock._classify(there, clock_timestamp())).status = 'free';
        END IF;
        IF free AND t > 0 AND v_slot = 0 THEN
          free := there.ended_at IS NOT NULL
                  AND (SELECT CASE WHEN pg_try_advisory_lock(q.h # dlock._k('n1'))
                                   THEN pg_advisory_unlock(q.h # dlock._k('n1')) ELSE false END);
        END IF;
        IF NOT free THEN
          RAISE SQLSTATE 'DLK93';
        END IF;
        got := c;
      EXCEPTION WHEN SQLSTATE 'DLK93' THEN
        NULL;
      END;
      EXIT WHEN got IS NOT NULL;
    END LOOP;
    IF got IS NULL THEN
      RAISE SQLSTATE 'DLK92';
    END IF;
    p.outcome := 'done';
    p.action := 'grant';
    p.slot := d.cand_slot[got];
    p.found := d.cand_target[got] > 0;
    IF p.found THEN
      p.token := rows[d.cand_target[got]].token;
    END IF;
    p.now := now;
  EXCEPTION WHEN SQLSTATE 'DLK92' THEN
    RETURN NULL;
  END;
  RETURN p;
END
$$;

-- The owner's own live lease, extended (CHANGE), and nothing else
CREATE FUNCTION dlock._attempt_extend(q dlock._req, deadline timestamptz, caller oid)
RETURNS dlock._plan
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  p dlock._plan;
  rows dlock.lease_state[];
  d dlock._decision;
  mine integer;
  now timestamptz;
BEGIN
  BEGIN
    IF NOT dlock._lock(q.h # dlock._k('n3'), true, deadline) THEN
      p.outcome := 'busy';
      RAISE SQLSTATE 'DLK94';
    END IF;
    mine := dlock._claim_own(q.name, q.h, q.owner, deadline, caller);
    IF mine = -2 THEN
      p.outcome := 'busy';
      RAISE SQLSTATE 'DLK94';
    END IF;
    rows := dlock._rows(q.name);
    now := clock_timestamp();
    d := dlock._decide(rows, q.shared, q.max_holders, q.owner, q.name, now, caller);
    IF d.mine IS NOT NULL THEN
      p.outcome := 'done';
      p.action := 'extend';
      p.slot := rows[d.mine].slot;
      p.found := true;
      p.token := rows[d.mine].token;
      p.now := now;
      RETURN p;
    END IF;
    p.outcome := CASE d.status WHEN 'free' THEN 'queued' WHEN 'live' THEN 'held' ELSE 'delayed' END;
    p.until := d.until;
    p.session_token := d.session_token;
    RAISE SQLSTATE 'DLK94';
  EXCEPTION WHEN SQLSTATE 'DLK94' THEN
    RETURN p;
  END;
END
$$;

-- Under the change lock (held by the caller): find the owner's live lease,
-- with its slot claimed when it is above 0 and the rows read again after
-- the claim.  Its slot; -1 when the owner holds none live; -2 when the
-- claim was not available in time.
CREATE FUNCTION dlock._claim_own(name text, h bigint, owner text, deadline timestamptz, caller oid)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  claimed integer := 0;
  mine dlock.lease_state;
  now timestamptz;
BEGIN
  LOOP
    now := clock_timestamp();
    mine := NULL;
    SELECT r.* INTO mine FROM unnest(dlock._rows(_claim_own.name)) r
     WHERE r.owner = _claim_own.owner AND dlock._may_act(r.holder_role, caller)
       AND (dlock._classify(r, now)).status = 'live'
     ORDER BY r.slot LIMIT 1;
    IF mine.slot IS NULL THEN
      RETURN -1;
    END IF;
    IF mine.slot = 0 OR mine.slot = claimed THEN
      RETURN mine.slot;
    END IF;
    IF NOT dlock._lock(h # dlock._k('slot') # (mine.slot::bigint << 24), true, deadline) THEN
      RETURN -2;
    END IF;
    claimed := mine.slot;
  END LOOP;
END
$$;

-- Every other grant (SERIAL): the decision of LeaseDecide, then the pins
-- of the slot it writes and of the rows it does not share with, taken
-- without waiting; when one is busy, everything is given back and that
-- one waited for alone, then the name is read again
CREATE FUNCTION dlock._attempt_serial(q dlock._req, deadline timestamptz, caller oid)
RETURNS dlock._plan
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  p dlock._plan;
  rows dlock.lease_state[];
  d dlock._decision;
  now timestamptz;
  k bigint;
  t integer;
  got integer;
  n2 bigint := q.h # dlock._k('n2');
  n3 bigint := q.h # dlock._k('n3');
  excl boolean := NOT q.shared AND q.max_holders = 1;
BEGIN
  LOOP
    p := NULL;
    BEGIN
      IF NOT pg_try_advisory_xact_lock(n2) THEN
        IF NOT dlock._lock(n2, true, deadline) THEN
          p.outcome := 'busy';
          RAISE SQLSTATE 'DLK95';
        END IF;
      END IF;
      IF NOT pg_try_advisory_xact_lock(n3) THEN
        IF NOT dlock._lock(n3, true, deadline) THEN
          p.outcome := 'busy';
          RAISE SQLSTATE 'DLK95';
        END IF;
      END IF;
      rows := dlock._rows(q.name);
      now := clock_timestamp();
      d := dlock._decide(rows, q.shared, q.max_holders, q.owner, q.name, now, caller);
      IF d.mine IS NOT NULL THEN
        p.outcome := 'done';
        p.action := 'extend';
        p.slot := rows[d.mine].slot;
        p.found := true;
        p.token := rows[d.mine].token;
        p.now := now;
        RETURN p;
      END IF;
      IF d.status <> 'free' THEN
        p.outcome := CASE d.status WHEN 'live' THEN 'held' ELSE 'delayed' END;
        p.until := d.until;
        p.session_token := d.session_token;
        RAISE SQLSTATE 'DLK95';
      END IF;
      -- the pin of the slot written: the first candidate whose pin is free
      FOR c IN 1 .. cardinality(d.cand_slot) LOOP
        t := d.cand_target[c];
        IF t > 0 THEN
          k := dlock._pin_key(q.h, rows[t].slot, rows[t].token);
        ELSIF d.cand_slot[c] = 0 THEN
          k := q.h # dlock._k('n1');
        ELSE
          k := NULL;
        END IF;
        IF k IS NULL OR pg_try_advisory_xact_lock(k) THEN
          got := c;
          EXIT;
        END IF;
        IF c = 1 THEN
          p.busy_key := k;
        END IF;
      END LOOP;
      IF got IS NULL THEN
        p.outcome := 'wait';
        RAISE SQLSTATE 'DLK95';
      END IF;
      -- and those of every other row it does not share with
      FOR j IN 1 .. coalesce(array_length(rows, 1), 0) LOOP
        CONTINUE WHEN j = d.cand_target[got];
        CONTINUE WHEN NOT excl AND rows[j].shared = q.shared AND rows[j].max_holders = q.max_holders;
        k := dlock._pin_key(q.h, rows[j].slot, rows[j].token);
        IF NOT pg_try_advisory_xact_lock(k) THEN
          p.outcome := 'wait';
          p.busy_key := k;
          RAISE SQLSTATE 'DLK95';
        END IF;
      END LOOP;
      p.outcome := 'done';
      p.action := 'grant';
      p.slot := d.cand_slot[got];
      p.found := d.cand_target[got] > 0;
      IF p.found THEN
        p.token := rows[d.cand_target[got]].token;
      END IF;
      p.now := now;
      RETURN p;
    EXCEPTION WHEN SQLSTATE 'DLK95' THEN
      IF p.outcome <> 'wait' THEN
        RETURN p;
      END IF;
    END;
    -- a transaction that fenced an old token is still open: wait for it
    -- alone, holding nothing, then look again
    IF NOT dlock._wait_free(p.busy_key, true, deadline) THEN
      p.outcome := 'busy';
      RETURN p;
    END IF;
  END LOOP;
END
$$;

-- The common case of an attempt, in one function: an exclusive request,
-- nobody waiting, a name with no row or one exclusive row in slot 0 whose
-- holder is not session-bound.  The same decisions as the general way
-- (_attempt), made without waiting for any lock; NULL when the case is not
-- this one, or a lock is busy: then the general way decides, from the
-- start.
CREATE FUNCTION dlock._fast_attempt(q dlock._req, caller oid)
RETURNS dlock._plan
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  p dlock._plan;
  qk bigint := q.h # 971293586498595353;            -- dlock._k('queue')
  looked boolean := false;
  n integer;
  rows dlock.lease_state[];
  r dlock.lease_state;
  ga timestamptz;
BEGIN
  IF q.shared OR q.max_holders <> 1 THEN
    RETURN NULL;
  END IF;
  BEGIN
    looked := pg_try_advisory_lock_shared(qk);
    IF NOT looked
       OR NOT pg_try_advisory_xact_lock(q.h # 8259534687944693243)   -- SERIAL: dlock._k('n2')
       OR NOT pg_try_advisory_xact_lock(q.h # 5023963199803620857)   -- and dlock._k('n3')
    THEN
      RAISE SQLSTATE 'DLK61';
    END IF;
    rows := ARRAY(SELECT s FROM dlock.lease_state s WHERE s.name = q.name);
    n := cardinality(rows);
    r := rows[1];
    IF n > 1 OR (n = 1 AND (r.slot <> 0 OR r.shared OR r.max_holders <> 1
                            OR (r.session_bound AND r.ended_at IS NULL)))
       OR current_setting('transaction_isolation') <> 'read committed' THEN
      RAISE SQLSTATE 'DLK61';
    END IF;
    p.now := clock_timestamp();
    p.slot := 0;
    p.found := n = 1;
    p.token := r.token;
    IF n = 1 THEN
      IF r.ended_at IS NULL AND r.expires_at > p.now THEN
        IF r.owner = q.owner AND dlock._may_act(r.holder_role, caller) THEN
          p.outcome := 'done';
          p.action := 'extend';
        ELSE
          p.outcome := 'held';
          p.until := r.expires_at;
          RAISE SQLSTATE 'DLK62';
        END IF;
      ELSIF r.lock_delay > '0' AND (r.ended_at IS NULL OR r.end_reason IS DISTINCT FROM 'released') THEN
        ga := dlock._after(coalesce(r.ended_at, r.expires_at), r.lock_delay);
        IF p.now < ga THEN
          p.outcome := 'delayed';
          p.until := ga;
          RAISE SQLSTATE 'DLK62';
        END IF;
      END IF;
    END IF;
    IF p.outcome IS NULL THEN
      -- slot 0's pin: the name's lock in GRANT mode
      IF NOT pg_try_advisory_xact_lock(q.h # 7535459766080761307) THEN   -- dlock._k('n1')
        RAISE SQLSTATE 'DLK61';
      END IF;
      p.outcome := 'done';
      p.action := 'grant';
    END IF;
    looked := NOT pg_advisory_unlock_shared(qk);
  EXCEPTION
    WHEN SQLSTATE 'DLK61' THEN
      IF looked THEN
        PERFORM pg_advisory_unlock_shared(qk);
      END IF;
      RETURN NULL;
    WHEN SQLSTATE 'DLK62' THEN
      PERFORM pg_advisory_unlock_shared(qk);
      RETURN p;
    WHEN OTHERS OR query_canceled THEN
      IF looked THEN
        PERFORM pg_advisory_unlock_shared(qk);
      END IF;
      RAISE;
  END;
  RETURN p;
END
$$;

-- One attempt to grant or extend a lease (AttemptGrant); with look, the
-- queue is looked at first (as try_acquire does): while others wait, only
-- the owner's own live lease is extended.  The look is a session-level
-- shared lock on the queue's key, which conflicts with the head's, held
-- while the attempt decides and given back right after it, also when an
-- error ends it.
CREATE FUNCTION dlock._attempt(q dlock._req, look boolean, deadline timestamptz,
                               extend_only boolean, caller oid)
RETURNS dlock._plan
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  p dlock._plan;
  qk bigint;
  looked boolean := false;
BEGIN
  IF NOT look THEN
    IF extend_only THEN
      RETURN dlock._attempt_extend(q, deadline, caller);
    END IF;
    p := dlock._attempt_alongside(q, deadline, caller);
    IF p.outcome IS NULL THEN
      p := dlock._attempt_serial(q, deadline, caller);
    END IF;
    RETURN p;
  END IF;
  qk := q.h # dlock._k('queue');
  BEGIN
    looked := pg_try_advisory_lock_shared(qk);
    p := dlock._attempt(q, false, deadline, extend_only OR NOT looked, caller);
    IF looked THEN
      looked := NOT pg_advisory_unlock_shared(qk);
    ELSIF p.outcome <> 'done' THEN
      -- others wait for the name: it is theirs first
      p.outcome := 'queued';
    END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    IF looked THEN
      PERFORM pg_advisory_unlock_shared(qk);
    END IF;
    RAISE;
  END;
  RETURN p;
END
$$;
--
-- Tokens (src/token.c): the next value of dlock.token_seq, once the
-- counter has been moved up to the server's clock (ticks of 2^-22 s since
-- 2026-01-01 00:00 UTC) at the first grant of this incarnation of the
-- database.  The incarnation is named by the system identifier, the WAL
-- timeline, the server's start, the database and the counter; its hash is
-- kept in dlock.token_incarnation.  setval() is not transactional: a
-- rolled-back first grant leaves the counter moved and the marker set.  The
-- move is made under the epoch lock, a session-level advisory lock held
-- for the move alone.
--
CREATE FUNCTION dlock._clock_ticks(t timestamptz)
RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT greatest(0, floor((extract(epoch FROM t)::numeric - 1767225600) * 4194304))::bigint $$;

CREATE FUNCTION dlock._token_next()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  mark bigint;
  marker bigint;
  marked boolean;
  counter bigint;
  clock bigint;
  token bigint;
  locked boolean := false;
BEGIN
  mark := ((('x' || substr(md5(concat_ws(':',
             CASE WHEN has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')
                  THEN (SELECT c.system_identifier FROM pg_control_system() c)::text END,
             CASE WHEN has_function_privilege('pg_catalog.pg_current_wal_insert_lsn()', 'EXECUTE')
                  THEN substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8) END,
             pg_postmaster_start_time()::text,
             (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())::text,
             'dlock.token_seq'::regclass::oid::text)), 1, 16))::bit(64)::bigint
           & 9223372036854775807) | 1);
  SELECT i.last_value, i.is_called INTO marker, marked FROM dlock.token_incarnation i;
  IF NOT (marked AND marker = mark) THEN
    BEGIN
      PERFORM pg_advisory_lock(dlock._k('epoch'));
      locked := true;
      SELECT i.last_value, i.is_called INTO marker, marked FROM dlock.token_incarnation i;
      IF NOT (marked AND marker = mark) THEN
        SELECT s.last_value INTO counter FROM dlock.token_seq s;
        clock := dlock._clock_ticks(clock_timestamp());
        IF counter < clock THEN
          PERFORM setval('dlock.token_seq', clock, true);
        END IF;
        PERFORM setval('dlock.token_incarnation', mark, true);
      END IF;
      PERFORM pg_advisory_unlock(dlock._k('epoch'));
      locked := false;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      IF locked THEN
        PERFORM pg_advisory_unlock(dlock._k('epoch'));
      END IF;
      RAISE;
    END;
  END IF;
  token := nextval('dlock.token_seq');
  IF token > 9007199254740991 OR token > dlock._clock_ticks(clock_timestamp()) + 3600::bigint * 4194304 THEN
    IF current_setting('dlock_sql.token_budget_warned', true) IS DISTINCT FROM 'on' THEN
      PERFORM set_config('dlock_sql.token_budget_warned', 'on', false);
      RAISE WARNING USING
        MESSAGE = format('dlock token %s is ahead of the server''s clock or past 2^53', token),
        DETAIL = format('Tokens follow the clock at 2^%s a second since 2026-01-01; the clock now is at %s.',
                        22, dlock._clock_ticks(clock_timestamp())),
        HINT = 'See docs/internals.md, I1, for the token budget.';
    END IF;
  END IF;
  RETURN token;
END
$$;
-- This backend changed a lease: the fence answers it cached may not hold
CREATE FUNCTION dlock._fence_forget()
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF pg_catalog.current_setting('dlock_sql.fence_cache', true) OPERATOR(pg_catalog.<>) '' THEN
    PERFORM pg_catalog.set_config('dlock_sql.fence_cache', '', true);
  END IF;
END
$$;
-- The session locks of this backend's session-bound leases that have
-- ended (and are past their lock-delay), given back before a new
-- session-bound grant (session.c, SessionLeasePrune).  A lock whose grant
-- rolled back has no row, and cannot be told from the application's own
-- advisory locks: it stays until the backend exits.
CREATE FUNCTION dlock._session_prune()
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  e record;
  now timestamptz := clock_timestamp();
BEGIN
  FOR e IN
    SELECT s AS r, s.xmin AS x FROM pg_locks l
      JOIN dlock.lease_state s
        ON s.token = (((l.classid::bigint << 32) | l.objid::bigint) # dlock._k('session'))
     WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.objsubid = 1
       AND l.mode = 'ExclusiveLock' AND l.granted
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND s.session_bound AND s.holder_pid = pg_backend_pid()
  LOOP
    -- an end in a transaction still open (this one) may yet roll back
    CONTINUE WHEN dlock._xid_status(e.x) = 'in progress';
    IF (dlock._classify(e.r, now)).status = 'free' THEN
      PERFORM pg_advisory_unlock((e.r).token # dlock._k('session'));
    END IF;
  END LOOP;
END
$$;

-- A lease ended by this backend: when it is session-bound and bound to
-- this backend, its session lock is given back now, at the call.  The C
-- edition gives it back at the commit, which SQL cannot wait for; given
-- back now, a head waiting on it moves on to the name's lock, which this
-- transaction holds to its end, and is granted at the commit all the
-- same.  A release that then rolls back leaves the lease ended with its
-- session (session_ended), not live.
CREATE FUNCTION dlock._ended(name text, slots integer[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  t bigint;
BEGIN
  FOR t IN SELECT s.token FROM dlock.lease_state s
            WHERE s.name = _ended.name AND s.slot = ANY (slots)
              AND s.session_bound AND s.holder_pid = pg_backend_pid()
  LOOP
    PERFORM dlock._unlock_session(t # dlock._k('session'), true);
  END LOOP;
  PERFORM dlock._fence_forget();
END
$$;

-- The write that a plan decided (grant.c: ExtendLease, GrantLeaseWithToken),
-- made outside the subtransactions of the decision, with its locks held
CREATE FUNCTION dlock._write(q dlock._req, p dlock._plan, caller oid)
RETURNS dlock.lease
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  l dlock.lease;
  t bigint;
  now timestamptz;
  exp timestamptz;
BEGIN
  IF p.action = 'extend' THEN
    exp := p.now + q.ttl_us * interval '1 microsecond';
    UPDATE dlock.lease_state s SET expires_at = exp, value = coalesce(q.value, s.value)
     WHERE s.name = q.name AND s.slot = p.slot
    RETURNING s.name, s.owner, s.token, s.expires_at INTO l;
    PERFORM dlock._fence_forget();
    RETURN l;
  END IF;

  IF q.session_bound THEN
    PERFORM dlock._session_prune();
  END IF;
  t := dlock._token_next();
  -- only a counter reset by hand can be behind the table
  IF p.found AND t <= p.token THEN
    RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
      MESSAGE = format('token counter is behind lease "%s"', q.name),
      DETAIL = format('The counter gave token %s, but the lease already had token %s.', t, p.token),
      HINT = 'Advance the counter with SELECT setval(''dlock.token_seq'', (SELECT max(token) FROM dlock.lease_state)).';
  END IF;
  now := clock_timestamp();
  exp := now + q.ttl_us * interval '1 microsecond';
  IF p.found THEN
    UPDATE dlock.lease_state s
       SET token = t, owner = q.owner, holder_role = caller::regrole, acquired_at = now,
           expires_at = exp, ended_at = NULL, end_reason = NULL,
           lock_delay = q.lock_delay_us * interval '1 microsecond',
           session_bound = q.session_bound,
           holder_pid = CASE WHEN q.session_bound THEN pg_backend_pid() END,
           value = q.value, shared = q.shared, max_holders = q.max_holders
     WHERE s.name = q.name AND s.slot = p.slot;
  ELSE
    INSERT INTO dlock.lease_state AS s
           (name, token, owner, holder_role, acquired_at, expires_at, ended_at, end_reason,
            lock_delay, session_bound, holder_pid, value, slot, shared, max_holders)
    VALUES (q.name, t, q.owner, caller::regrole, now, exp, NULL, NULL,
            q.lock_delay_us * interval '1 microsecond', q.session_bound,
            CASE WHEN q.session_bound THEN pg_backend_pid() END,
            q.value, p.slot, q.shared, q.max_holders)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
      -- a row this transaction's snapshot does not see (REPEATABLE READ)
      RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
        MESSAGE = 'could not serialize access due to concurrent update',
        DETAIL = format('Lease "%s" was granted after this transaction took its snapshot.', q.name);
    END IF;
  END IF;
  IF q.session_bound THEN
    PERFORM pg_advisory_lock(t # dlock._k('session'));
    -- a session-bound grant cannot be prepared: the lease would follow this
    -- backend while its commit happens elsewhere, or never.  A transaction
    -- that notified cannot be prepared (0A000); nobody listens on the channel.
    PERFORM pg_notify('dlock_session_bound_grant', t::text);
  END IF;
  -- a grant lost in a crash would leave its holder believing in it: its
  -- commit is flushed and waits for synchronous standbys
  IF dlock._setting_on('dlock.durable_grants', true)
     AND current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;
  PERFORM dlock._fence_forget();
  l.name := q.name;
  l.owner := q.owner;
  l.token := t;
  l.expires_at := exp;
  RETURN l;
END
$$;

-- A session that takes and gives back a session-level lock (the head of a
-- queue, a watcher, the epoch lock) gives it back when an error ends its
-- wait; it holds it exactly when pg_locks says so
CREATE FUNCTION dlock._unlock_session(k bigint, x boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF EXISTS (SELECT FROM pg_locks l
              WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.objsubid = 1
                AND l.granted AND l.mode = CASE WHEN x THEN 'ExclusiveLock' ELSE 'ShareLock' END
                AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                AND l.classid = ((k >> 32) & 4294967295)::oid
                AND l.objid = (k & 4294967295)::oid) THEN
    IF x THEN
      PERFORM pg_advisory_unlock(k);
    ELSE
      PERFORM pg_advisory_unlock_shared(k);
    END IF;
  END IF;
END
$$;

-- A session-level lock, waiting within deadline
CREATE FUNCTION dlock._session_lock(k bigint, x boolean, deadline timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  ms numeric;
  saved text;
BEGIN
  IF x THEN
    IF pg_try_advisory_lock(k) THEN
      RETURN true;
    END IF;
  ELSIF pg_try_advisory_lock_shared(k) THEN
    RETURN true;
  END IF;
  IF deadline = '-infinity' THEN
    RETURN false;
  END IF;
  IF deadline IS NULL THEN
    IF x THEN
      PERFORM pg_advisory_lock(k);
    ELSE
      PERFORM pg_advisory_lock_shared(k);
    END IF;
    RETURN true;
  END IF;
  ms := ceil(extract(epoch FROM deadline - clock_timestamp()) * 1000);
  IF ms <= 0 THEN
    RETURN false;
  END IF;
  saved := current_setting('lock_timeout');
  BEGIN
    PERFORM set_config('lock_timeout', least(ms, 2147483647)::bigint::text, true);
    IF x THEN
      PERFORM pg_advisory_lock(k);
    ELSE
      PERFORM pg_advisory_lock_shared(k);
    END IF;
    PERFORM set_config('lock_timeout', saved, true);
    RETURN true;
  EXCEPTION WHEN lock_not_available THEN
    -- the lock may have been handed over as the timeout fired: PostgreSQL
    -- then keeps it granted and raises the timeout all the same, and a
    -- session-level lock outlives this block's rollback
    PERFORM dlock._unlock_session(k, x);
    RETURN false;
  END;
END
$$;

-- How often a waiting head, or a watcher, reads the lease again to see a
-- release that no wake-up announces (the SQL edition has no latches to
-- set), given how long it has waited: every millisecond at first, an
-- eighth of the wait so far after that, and every 10 ms from 80 ms on.  A
-- name that many take in turn is held for moments, and its next head sees
-- the release within about a millisecond; a long wait costs a read every
-- 10 ms.
CREATE FUNCTION dlock._poll(waited interval)
RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$ SELECT least(interval '10 milliseconds', greatest(interval '1 millisecond', waited / 8)) $$;

-- Sleep until a moment, the deadline or the next poll of a wait that began
-- at since (NULL: long ago), whichever comes first; pg_sleep() serves
-- cancels and statement_timeout at once
CREATE FUNCTION dlock._sleep(until timestamptz, deadline timestamptz, since timestamptz DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  now timestamptz := clock_timestamp();
  wake timestamptz := least(coalesce(until, 'infinity'), coalesce(deadline, 'infinity'),
                            now + dlock._poll(CASE WHEN since IS NULL OR since > now THEN interval '1 hour'
                                                   ELSE now - since END));
BEGIN
  IF wake > now THEN
    PERFORM pg_sleep(extract(epoch FROM wake - now)::double precision);
  END IF;
END
$$;

-- The head waits for a session-bound holder on its session lock, so that
-- the holder's exit ends the wait at once; a holder that is this very
-- backend is waited for until its expiry
CREATE FUNCTION dlock._wait_holder(token bigint, until timestamptz, deadline timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  slice timestamptz := least(coalesce(until, 'infinity'), coalesce(deadline, 'infinity'),
                             clock_timestamp() + interval '100 milliseconds');
BEGIN
  IF (SELECT s.holder_pid FROM dlock.lease_state s WHERE s.token = _wait_holder.token
       LIMIT 1) = pg_backend_pid() THEN
    PERFORM dlock._sleep(until, deadline);
    RETURN;
  END IF;
  PERFORM dlock._wait_free(token # dlock._k('session'), false, slice);
END
$$;

-- 55P03 for a wait that ran out of time (lease_api.c, AcquireTimedOut)
CREATE FUNCTION dlock._timed_out(q dlock._req, outcome text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'lock_not_available',
    MESSAGE = format('could not acquire lease "%s" within the timeout', q.name),
    DETAIL = CASE outcome
               WHEN 'held' THEN
                 CASE WHEN q.max_holders > 1 THEN format('All %s permits are held.', q.max_holders)
                      WHEN q.shared THEN 'Another owner holds an exclusive lease.'
                      ELSE 'Another owner holds the lease.' END
               WHEN 'delayed' THEN 'The lease ended without a release and is in its lock-delay.'
               WHEN 'queued' THEN 'Other sessions are waiting for the lease ahead of this one.'
               ELSE 'The lease is being changed, or a transaction still has writes fenced under its previous grant.'
             END;
END
$$;

-- An owner-less acquire() that would wait only for leases of owners this
-- backend generated waits for itself: 55006 (lease_api.c,
-- RefuseWaitOnOwnLease).  Read without a lock: it only chooses between an
-- error and a wait.
CREATE FUNCTION dlock._refuse_own_wait(q dlock._req)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  now timestamptz := clock_timestamp();
  prefix text;
  other_kind boolean;
  blocking integer;
  generated_here integer;
BEGIN
  IF NOT q.generated OR NOT dlock._setting_on('dlock.allow_session_bound', true) THEN
    RETURN;
  END IF;
  prefix := dlock._owner_prefix();
  -- what it waits for: the live leases of kinds it cannot share with, or,
  -- when all are of its kind (a full semaphore), all of them
  SELECT bool_or(NOT dlock._shares(s.shared, s.max_holders, q.shared, q.max_holders))
    INTO other_kind
    FROM dlock.lease_state s
   WHERE s.name = q.name AND (dlock._classify(s, now)).status = 'live';
  SELECT count(*), count(*) FILTER (WHERE octet_length(s.owner) = 32 AND left(s.owner, 16) = prefix)
    INTO blocking, generated_here
    FROM dlock.lease_state s
   WHERE s.name = q.name AND (dlock._classify(s, now)).status = 'live'
     AND NOT (coalesce(other_kind, false)
              AND dlock._shares(s.shared, s.max_holders, q.shared, q.max_holders));
  IF blocking = 0 OR generated_here < blocking THEN
    RETURN;
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'object_in_use',
    MESSAGE = format('lease "%s" is already held by this session', q.name),
    DETAIL = 'An earlier dlock.acquire() without an owner was granted it under an owner the server generated; this call generates another owner and would wait until that lease ends.',
    HINT = 'Keep the owner that the first call returned, and pass it to dlock.renew() or dlock.release(); or pass the same owner to every dlock.acquire().';
END
$$;

--
-- The steps of the lease functions: arguments, then the decision, with its
-- locks; the functions below raise what these raise, and then write
--
CREATE TYPE dlock._step AS (
  q      dlock._req,
  p      dlock._plan,
  caller oid
);

CREATE FUNCTION dlock._try_acquire_step(name text, ttl interval, owner text, lock_delay interval,
                                        session_bound boolean, value text, queue boolean,
                                        shared boolean, max_holders integer)
RETURNS dlock._step
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  s dlock._step;
BEGIN
  s.q := dlock._request(name, ttl, owner, lock_delay, session_bound, value, queue, shared, max_holders);
  PERFORM dlock._writable('dlock.try_acquire');
  s.caller := dlock._caller();
  s.p := dlock._fast_attempt(s.q, s.caller);
  IF (s.p).outcome IS NULL THEN
    s.p := dlock._attempt(s.q, true, '-infinity', false, s.caller);
  END IF;
  RETURN s;
END
$$;

-- acquire() (lease_api.c): granted at once when nobody waits and the name
-- is grantable; otherwise it queues on the name's queue lock, a
-- session-level advisory lock that the lock manager grants in arrival
-- order, and as the head of the queue waits for the lease: for the lock of
-- a transaction that is changing the name, in the lock manager, and for a
-- committed lease, in short sleeps until its expiry (or lock-delay end),
-- reading it again every dlock._poll() from its turn as head on to see a
-- release.
CREATE FUNCTION dlock._acquire_step(name text, ttl interval, owner text, timeout interval,
                                    lock_delay interval, session_bound boolean, value text,
                                    shared boolean, max_holders integer)
RETURNS dlock._step
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  s dlock._step;
  q dlock._req;
  p dlock._plan;
  deadline timestamptz;
  qk bigint;
  q_held boolean := false;
  head_since timestamptz;
  checked_own boolean := false;
BEGIN
  q := dlock._request(name, ttl, owner, lock_delay, session_bound, value, false, shared, max_holders);
  deadline := dlock._deadline(dlock._timeout_us(timeout));
  PERFORM dlock._writable('dlock.acquire');
  s.q := q;
  s.caller := dlock._caller();

  -- nobody waits: granted at once, or joins the queue (the owner's own
  -- live lease is extended at once, also while others wait)
  p := dlock._fast_attempt(q, s.caller);
  IF p.outcome IS NULL THEN
    p := dlock._attempt(q, true, '-infinity', false, s.caller);
  END IF;
  IF p.outcome = 'done' THEN
    s.p := p;
    RETURN s;
  END IF;
  IF deadline = '-infinity' THEN
    PERFORM dlock._timed_out(q, p.outcome);
  END IF;

  qk := q.h # dlock._k('queue');
  PERFORM dlock._refuse_own_wait(q);
  BEGIN
    q_held := dlock._session_lock(qk, true, deadline);
    IF NOT q_held THEN
      PERFORM dlock._timed_out(q, 'queued');
    END IF;
    head_since := clock_timestamp();
    LOOP
      p := dlock._attempt(q, false, deadline, false, s.caller);
      EXIT WHEN p.outcome = 'done' OR p.outcome = 'busy'
             OR (deadline IS NOT NULL AND clock_timestamp() >= deadline);
      IF NOT checked_own AND p.outcome = 'held' THEN
        PERFORM dlock._refuse_own_wait(q);
        checked_own := true;
      END IF;
      IF p.outcome = 'held' AND p.session_token IS NOT NULL THEN
        PERFORM dlock._wait_holder(p.session_token, p.until, deadline);
      ELSE
        PERFORM dlock._sleep(p.until, deadline, head_since);
      END IF;
    END LOOP;
    PERFORM pg_advisory_unlock(qk);
    q_held := false;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- q_held or not: an error (a cancel, lock_timeout) may have come after
    -- the queue lock was granted and before q_held said so
    PERFORM dlock._unlock_session(qk, true);
    RAISE;
  END;
  IF p.outcome <> 'done' THEN
    PERFORM dlock._timed_out(q, p.outcome);
  END IF;
  s.p := p;
  RETURN s;
END
$$;

-- The owner's live lease of a name, for renew and release (grant.c,
-- FetchHeldLease): the change lock and the slot's claim held when found
CREATE FUNCTION dlock._held(name text, h bigint, owner text, caller oid)
RETURNS dlock._plan
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  p dlock._plan;
BEGIN
  BEGIN
    PERFORM pg_advisory_xact_lock(h # dlock._k('n3'));
    p.slot := dlock._claim_own(name, h, owner, NULL, caller);
    p.now := clock_timestamp();
    IF p.slot < 0 THEN
      RAISE SQLSTATE 'DLK98';
    END IF;
    p.outcome := 'done';
  EXCEPTION WHEN SQLSTATE 'DLK98' THEN
    p.outcome := NULL;
  END;
  RETURN p;
END
$$;

CREATE FUNCTION dlock._change_step(name text, owner text, ttl interval, value text, funcname text)
RETURNS dlock._step
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  s dlock._step;
  q dlock._req;
BEGIN
  q.name := dlock._check_name(name, 'lease name');
  q.owner := dlock._owner(owner, false);
  IF funcname = 'dlock.renew' THEN
    q.ttl_us := dlock._ttl_us(ttl);
    q.value := dlock._value(value);
  ELSIF dlock._setting_on('dlock.lazy_release', false) THEN
    RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
      MESSAGE = 'dlock.lazy_release needs the C edition of dlock',
      DETAIL = 'A lazy release is decided at commit, by a transaction callback that the SQL edition of dlock has none of.',
      HINT = 'Set dlock.lazy_release to off (a release then commits with the caller''s synchronous_commit), or install the C edition.';
  END IF;
  PERFORM dlock._writable(funcname);
  q.h := dlock.name_key(q.name);
  s.q := q;
  s.caller := dlock._caller();
  s.p := dlock._held(q.name, q.h, q.owner, s.caller);
  RETURN s;
END
$$;

-- force_release (grant.c, ForceReleaseAll): under SERIAL, every live lease
-- of the name, for a role that may act as each holder's role (or none)
CREATE FUNCTION dlock._force_step(name text, OUT ended_name text, OUT slots integer[],
                                  OUT now timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  h bigint;
  rows dlock.lease_state[];
  r dlock.lease_state;
  caller oid;
BEGIN
  ended_name := dlock._check_name(name, 'lease name');
  PERFORM dlock._writable('dlock.force_release');
  h := dlock.name_key(ended_name);
  caller := dlock._caller();
  slots := '{}';
  BEGIN
    PERFORM pg_advisory_xact_lock(h # dlock._k('n2'));
    PERFORM pg_advisory_xact_lock(h # dlock._k('n3'));
    rows := dlock._rows(ended_name);
    now := clock_timestamp();
    FOREACH r IN ARRAY coalesce(rows, '{}') LOOP
      IF (dlock._classify(r, now)).status = 'live' THEN
        IF NOT dlock._may_act(r.holder_role, caller) THEN
          RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('permission denied to force-release lease "%s"', ended_name),
            DETAIL = format('Only roles with the privileges of role "%s" may end its leases.',
                            coalesce((SELECT a.rolname FROM pg_roles a WHERE a.oid = r.holder_role)::text,
                                     '(dropped role)'));
        END IF;
        slots := slots || r.slot;
      END IF;
    END LOOP;
    IF cardinality(slots) = 0 THEN
      RAISE SQLSTATE 'DLK99';
    END IF;
  EXCEPTION WHEN SQLSTATE 'DLK99' THEN
    slots := NULL;
  END;
END
$$;

--
-- The lease functions.  Each one runs its step (arguments, decision)
-- first and raises what the step raised from one place, then writes.
--
-- The hot paths go ahead of the steps: a grant of an exclusive lease
-- (_grant_fast(), which try_acquire() and acquire() call first), and its
-- release (written out in release()), by an owner given as an argument,
-- with every argument and setting ordinary, under READ COMMITTED, of a
-- name with no row or one exclusive row in slot 0 whose holder is not
-- session-bound, while nobody waits for it.  Their decisions are those of
-- the general way, written out for this case (the general way's calls cost
-- more than most of the work), and taken without waiting for any lock;
-- whatever is not this case leaves having changed nothing, and the general
-- way decides from the start.
--

-- _grant_fast: the hot path of try_acquire() and acquire() (see above),
-- for a name, ttl, owner and value given, every other argument at its
-- default (the callers check theirs).  Returns the lease granted, or
-- extended for its own owner; a lease with its name alone when the name is
-- held or in its lock-delay (try_acquire() refuses, acquire() waits the
-- general way); NULL, having changed nothing, when this is not the case it
-- decides.
CREATE FUNCTION dlock._grant_fast(name text, ttl interval, owner text, value text)
RETURNS dlock.lease
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  l dlock.lease;
  h bigint;
  qk bigint;
  looked boolean := false;
  us numeric;
  rows dlock.lease_state[];
  r dlock.lease_state;
  n integer;
  now timestamptz;
  extend boolean := false;
  caller oid;
  t bigint;
  exp timestamptz;
BEGIN
  IF _grant_fast.name IS NULL OR _grant_fast.name = '' OR octet_length(_grant_fast.name) > 1024
     OR ttl IS NULL OR _grant_fast.owner IS NULL OR _grant_fast.owner = '' OR octet_length(_grant_fast.owner) > 256
     OR octet_length(_grant_fast.value) > 1024
     OR NOT isfinite(ttl) OR substr(interval_send(ttl), 13) <> int4send(0)
     OR coalesce(current_setting('dlock.max_ttl', true), '') <> ''
     OR coalesce(current_setting('dlock.default_lock_delay', true), '') <> ''
     OR current_setting('transaction_isolation') <> 'read committed'
     OR current_setting('transaction_read_only') <> 'off'
     OR pg_is_in_recovery() THEN
    RETURN NULL;
  END IF;
  us := extract(epoch FROM ttl) * 1000000;
  IF us <= 0 OR us > 86400000000 THEN
    RETURN NULL;
  END IF;
  h := dlock.name_key(_grant_fast.name);
  qk := h # 971293586498595353;                                   -- dlock._k('queue')
  caller := quote_ident(CASE current_setting('role') WHEN 'none' THEN SESSION_USER::text
                             ELSE current_setting('role') END)::regrole::oid;
  BEGIN
    looked := pg_try_advisory_lock_shared(qk);
    IF NOT looked
       OR NOT pg_try_advisory_xact_lock(h # 8259534687944693243)  -- SERIAL: dlock._k('n2')
       OR NOT pg_try_advisory_xact_lock(h # 5023963199803620857)  -- and dlock._k('n3')
    THEN
      RAISE SQLSTATE 'DLK61';
    END IF;
    rows := ARRAY(SELECT ls FROM dlock.lease_state ls WHERE ls.name = _grant_fast.name);
    n := cardinality(rows);
    r := rows[1];
    IF n > 1 OR (n = 1 AND (r.slot <> 0 OR r.shared OR r.max_holders <> 1
                            OR (r.session_bound AND r.ended_at IS NULL))) THEN
      RAISE SQLSTATE 'DLK61';
    END IF;
    now := clock_timestamp();
    IF n = 1 THEN
      IF r.ended_at IS NULL AND r.expires_at > now THEN
        IF r.owner = _grant_fast.owner AND (r.holder_role::oid = caller OR dlock._may_act(r.holder_role, caller)) THEN
          extend := true;
        ELSE
          l.name := _grant_fast.name;                                        -- held
          RAISE SQLSTATE 'DLK61';
        END IF;
      ELSIF r.lock_delay > '0' AND (r.ended_at IS NULL OR r.end_reason IS DISTINCT FROM 'released')
            AND now < dlock._after(coalesce(r.ended_at, r.expires_at), r.lock_delay) THEN
        l.name := _grant_fast.name;                                          -- in its lock-delay
        RAISE SQLSTATE 'DLK61';
      END IF;
    END IF;
    -- a new token into slot 0: its pin, the name's lock in GRANT mode
    IF NOT extend AND NOT pg_try_advisory_xact_lock(h # 7535459766080761307) THEN   -- dlock._k('n1')
      l.name := NULL;
      RAISE SQLSTATE 'DLK61';
    END IF;
    looked := NOT pg_advisory_unlock_shared(qk);
  EXCEPTION
    WHEN SQLSTATE 'DLK61' THEN
      IF looked THEN
        PERFORM pg_advisory_unlock_shared(qk);
      END IF;
      IF l.name IS NULL THEN
        RETURN NULL;
      END IF;
      RETURN l;
    WHEN OTHERS OR query_canceled THEN
      IF looked THEN
        PERFORM pg_advisory_unlock_shared(qk);
      END IF;
      RAISE;
  END;

  IF extend THEN
    UPDATE dlock.lease_state ls
       SET expires_at = now + make_interval(secs => us / 1000000), value = coalesce(_grant_fast.value, ls.value)
     WHERE ls.name = _grant_fast.name AND ls.slot = 0
    RETURNING ls.name, ls.owner, ls.token, ls.expires_at INTO l;
  ELSE
    t := dlock._token_next();
    IF n = 1 AND t <= r.token THEN
      RETURN NULL;                       -- the general way says why
    END IF;
    now := clock_timestamp();
    exp := now + make_interval(secs => us / 1000000);
    IF n = 1 THEN
      UPDATE dlock.lease_state ls
         SET token = t, owner = _grant_fast.owner, holder_role = caller::regrole, acquired_at = now,
             expires_at = exp, ended_at = NULL, end_reason = NULL, lock_delay = '0',
             session_bound = false, holder_pid = NULL, value = _grant_fast.value, shared = false, max_holders = 1
       WHERE ls.name = _grant_fast.name AND ls.slot = 0;
    ELSE
      INSERT INTO dlock.lease_state AS ls
             (name, token, owner, holder_role, acquired_at, expires_at, lock_delay,
              session_bound, value, slot, shared, max_holders)
      VALUES (_grant_fast.name, t, _grant_fast.owner, caller::regrole, now, exp, '0', false, _grant_fast.value, 0, false, 1)
      ON CONFLICT DO NOTHING;
      IF NOT FOUND THEN
        RETURN NULL;
      END IF;
    END IF;
    IF (coalesce(current_setting('dlock.durable_grants', true), '') = ''
        OR dlock._setting_on('dlock.durable_grants', true))
       AND current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
      PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    l.name := _grant_fast.name;
    l.owner := _grant_fast.owner;
    l.token := t;
    l.expires_at := exp;
  END IF;
  IF current_setting('dlock_sql.fence_cache', true) <> '' THEN
    PERFORM set_config('dlock_sql.fence_cache', '', true);
  END IF;
  RETURN l;
END
$$;

CREATE FUNCTION dlock.try_acquire(name text, ttl interval, owner text DEFAULT NULL,
                                  lock_delay interval DEFAULT NULL,
                                  session_bound boolean DEFAULT false,
                                  value text DEFAULT NULL,
                                  queue boolean DEFAULT false,
                                  shared boolean DEFAULT false,
                                  max_holders integer DEFAULT 1)
RETURNS SETOF dlock.lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 1
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  s dlock._step;
  l dlock.lease;
BEGIN
  -- the hot path (see above)
  IF try_acquire.lock_delay IS NULL AND try_acquire.session_bound IS NOT DISTINCT FROM false
     AND try_acquire.queue IS NOT DISTINCT FROM false AND try_acquire.shared IS NOT DISTINCT FROM false
     AND try_acquire.max_holders IS NOT DISTINCT FROM 1 THEN
    l := dlock._grant_fast(try_acquire.name, ttl, try_acquire.owner, try_acquire.value);
    IF l.name IS NOT NULL THEN
      IF l.token IS NOT NULL THEN
        RETURN NEXT l;
      END IF;
      RETURN;
    END IF;
  END IF;
  BEGIN
    s := dlock._try_acquire_step(name, ttl, owner, lock_delay, session_bound, value, queue, shared, max_holders);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  IF (s.p).outcome = 'done' THEN
    RETURN NEXT dlock._write(s.q, s.p, s.caller);
  END IF;
END
$$;
COMMENT ON FUNCTION dlock.try_acquire(text, interval, text, interval, boolean, text, boolean, boolean, integer) IS
  'Grants a lease of name for ttl at once and returns it as one row, or returns no row when another owner holds it, it is being changed, it is in its lock-delay, or others wait for it; never blocks. NULL owner: the server generates one. lock_delay NULL: dlock.default_lock_delay. value: published in dlock.leases (the same owner asking again keeps the old one when NULL). queue: needs the C edition (0A000). shared: a shared lease, live alongside other shared ones. max_holders: a permit of a counting semaphore, at most max_holders live at once.';

CREATE FUNCTION dlock.acquire(name text, ttl interval, owner text DEFAULT NULL,
                              timeout interval DEFAULT NULL,
                              lock_delay interval DEFAULT NULL,
                              session_bound boolean DEFAULT false,
                              value text DEFAULT NULL,
                              shared boolean DEFAULT false,
                              max_holders integer DEFAULT 1)
RETURNS dlock.lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  s dlock._step;
  l dlock.lease;
BEGIN
  -- the hot path (see above); a name held or in its lock-delay is waited
  -- for the general way
  IF acquire.lock_delay IS NULL AND acquire.session_bound IS NOT DISTINCT FROM false
     AND acquire.shared IS NOT DISTINCT FROM false AND acquire.max_holders IS NOT DISTINCT FROM 1
     AND (acquire.timeout IS NULL OR (isfinite(acquire.timeout) AND substr(interval_send(acquire.timeout), 13) = int4send(0)
                                      AND acquire.timeout >= '0')) THEN
    l := dlock._grant_fast(acquire.name, ttl, acquire.owner, acquire.value);
    IF l.token IS NOT NULL THEN
      RETURN l;
    END IF;
  END IF;
  BEGIN
    s := dlock._acquire_step(name, ttl, owner, timeout, lock_delay, session_bound, value, shared, max_holders);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  RETURN dlock._write(s.q, s.p, s.caller);
END
$$;
COMMENT ON FUNCTION dlock.acquire(text, interval, text, interval, interval, boolean, text, boolean, integer) IS
  'Grants a lease of name for ttl, waiting in arrival order (one queue for every kind) until it is free; timeout NULL waits until cancelled, 0 does not wait; raises 55P03 when the timeout passes. value: published in dlock.leases. shared: a shared lease. max_holders: a permit of a counting semaphore.';

CREATE FUNCTION dlock.renew(name text, owner text, ttl interval, value text DEFAULT NULL)
RETURNS dlock.lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  s dlock._step;
  l dlock.lease;
BEGIN
  BEGIN
    s := dlock._change_step(name, owner, ttl, value, 'dlock.renew');
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  IF (s.p).outcome IS NULL THEN
    RETURN NULL;
  END IF;
  UPDATE dlock.lease_state t
     SET expires_at = (s.p).now + (s.q).ttl_us * interval '1 microsecond',
         value = coalesce((s.q).value, t.value)
   WHERE t.name = (s.q).name AND t.slot = (s.p).slot
  RETURNING t.name, t.owner, t.token, t.expires_at INTO l;
  PERFORM dlock._fence_forget();
  RETURN l;
END
$$;
COMMENT ON FUNCTION dlock.renew(text, text, interval, text) IS
  'Extends a live lease held by owner to ttl from now, same token; NULL when owner does not hold a live lease. value, when not NULL, replaces the published value.';

CREATE FUNCTION dlock.release(name text, owner text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  s dlock._step;
  h bigint;
  rows dlock.lease_state[];
  r dlock.lease_state;
  n integer;
  now timestamptz;
  caller oid;
  held boolean;
BEGIN
  -- the hot path (see above)
  <<fast>>
  BEGIN
    IF release.name IS NULL OR release.name = '' OR octet_length(release.name) > 1024
       OR release.owner IS NULL OR release.owner = '' OR octet_length(release.owner) > 256
       OR coalesce(current_setting('dlock.lazy_release', true), '') NOT IN ('', 'off', 'false')
       OR current_setting('transaction_isolation') <> 'read committed'
       OR current_setting('transaction_read_only') <> 'off'
       OR pg_is_in_recovery() THEN
      EXIT fast;
    END IF;
    h := dlock.name_key(release.name);
    caller := quote_ident(CASE current_setting('role') WHEN 'none' THEN SESSION_USER::text
                               ELSE current_setting('role') END)::regrole::oid;
    BEGIN
      PERFORM pg_advisory_xact_lock(h # 5023963199803620857);        -- CHANGE: dlock._k('n3')
      rows := ARRAY(SELECT ls FROM dlock.lease_state ls WHERE ls.name = release.name);
      n := cardinality(rows);
      r := rows[1];
      IF n > 1 OR (n = 1 AND (r.slot <> 0 OR r.session_bound)) THEN
        RAISE SQLSTATE 'DLK63';
      END IF;
      now := clock_timestamp();
      held := n = 1 AND r.ended_at IS NULL AND r.expires_at > now AND r.owner = release.owner
              AND (r.holder_role::oid = caller OR dlock._may_act(r.holder_role, caller));
      IF NOT held THEN
        RAISE SQLSTATE 'DLK63';
      END IF;
    EXCEPTION WHEN SQLSTATE 'DLK63' THEN
      IF held IS NULL THEN
        EXIT fast;
      END IF;
      RETURN false;
    END;
    UPDATE dlock.lease_state ls SET ended_at = now, end_reason = 'released'
     WHERE ls.name = release.name AND ls.slot = 0;
    IF current_setting('dlock_sql.fence_cache', true) <> '' THEN
      PERFORM set_config('dlock_sql.fence_cache', '', true);
    END IF;
    RETURN true;
  END;
  BEGIN
    s := dlock._change_step(name, owner, NULL, NULL, 'dlock.release');
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  IF (s.p).outcome IS NULL THEN
    RETURN false;
  END IF;
  UPDATE dlock.lease_state t SET ended_at = (s.p).now, end_reason = 'released'
   WHERE t.name = (s.q).name AND t.slot = (s.p).slot;
  PERFORM dlock._ended((s.q).name, ARRAY[(s.p).slot]);
  RETURN true;
END
$$;
COMMENT ON FUNCTION dlock.release(text, text) IS
  'Ends the lease of name if owner holds it live (compare-and-release); false otherwise. The transaction commits with the caller''s synchronous_commit (dlock.lazy_release needs the C edition).';

CREATE FUNCTION dlock.force_release(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  f record;
BEGIN
  BEGIN
    f := dlock._force_step(name);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  IF f.slots IS NULL THEN
    RETURN false;
  END IF;
  UPDATE dlock.lease_state t SET ended_at = f.now, end_reason = 'force_released'
   WHERE t.name = f.ended_name AND t.slot = ANY (f.slots);
  PERFORM dlock._ended(f.ended_name, f.slots);
  RETURN true;
END
$$;
COMMENT ON FUNCTION dlock.force_release(text) IS
  'Ends the live lease of name whoever holds it, for a role with the privileges of the holder''s role; false when there is none. The old token fails dlock.fence() from then on.';

--
-- dlock.fence() (src/fence.c).  It runs once per row of a guarded UPDATE,
-- so it is as light as it can be: it runs with the caller's rights (the
-- columns it reads are in dlock.leases anyway, through a view of its own)
-- and without a SET clause, and so names every function, operator and type
-- it uses by schema.  A true answer takes the token's pin, a
-- transaction-level advisory lock held to the end of the transaction, and
-- is cached for the rest of it (dlock_sql.fence_cache, a setting local to the
-- transaction, forgotten when this backend changes a lease).  Its own
-- settings are under the prefix dlock_sql, not dlock: a session that loaded
-- the C edition's library (before a move between the editions) reserves
-- dlock.* for that library's settings, and setting another one is an error
-- there.
--
CREATE VIEW dlock._fence_rows AS
SELECT s.name, s.token, s.slot, s.expires_at, s.ended_at, s.session_bound, s.holder_pid,
       s.xmax AS row_xmax, s.end_reason
  FROM dlock.lease_state s;
GRANT SELECT ON dlock._fence_rows TO PUBLIC;

--
-- The stale-fence log line (src/stats/stats.c, StaleFenceReport): fence()
-- answered false for the token of a lease of the name that is no longer
-- live.  Its wording is the C edition's.  The rate limit is the C
-- edition's when it is not preloaded: this backend's own, at most one line
-- per name every 10 s and 64 names in a window; the next line of a name
-- says how many of its checks were not logged meanwhile, and of other
-- names.  The window is kept in the setting dlock_sql.stale_log
-- ("others:full_until;key:logged_at:unlogged;...", in microseconds since
-- 1970; full_until: every slot is in its window until then), which a rolled-back
-- transaction takes back like any setting.  An older token of the name is
-- not logged: the rows keep only the last token of each holder, and tokens
-- are database-wide (the C edition logs it only with its statistics in
-- shared memory).  The line comes with a CONTEXT line, which PL/pgSQL
-- adds and only a superuser's setting (log_error_verbosity) takes off.
-- dlock.log_stale_fences = off logs nothing.  It runs as the caller, as
-- fence() does, and reads nothing but its arguments and settings.
--
CREATE FUNCTION dlock._stale_report(name text, token bigint, key bigint, ended_at timestamptz,
                                    end_reason text, expires_at timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  now timestamptz := clock_timestamp();
  now_us bigint := floor(extract(epoch FROM now) * 1000000)::bigint;
  window_us constant bigint := 10000000;
  names_max constant integer := 64;
  st text;
  head text;
  p integer;
  e text;
  f text[];
  others bigint := 0;
  full_until bigint := 0;     -- every slot in its window until then
  slots bigint[];             -- one row per slot: key, logged_at, unlogged
  n integer;
  mine integer;
  spare integer;
  unlogged bigint := 0;
  ended text;
  gone text;
BEGIN
  IF NOT dlock._setting_on('dlock.log_stale_fences', true) THEN
    RETURN;
  END IF;
  -- "others:full_until;key:logged_at:unlogged;..."
  st := coalesce(current_setting('dlock_sql.stale_log', true), '');
  head := split_part(st, ';', 1);
  IF head ~ '^[0-9]+:[0-9]+$' THEN
    others := split_part(head, ':', 1)::bigint;
    full_until := split_part(head, ':', 2)::bigint;
  ELSE
    st := '0:0';
  END IF;

  -- The common cases of a flood, changed in place: the name in its window
  -- (one more check of it not logged), or not in the table while every
  -- slot is in its window (one more of the others)
  p := strpos(st, ';' || key || ':');
  IF p > 0 THEN
    e := split_part(substr(st, p + 1), ';', 1);
    f := string_to_array(e, ':');
    IF cardinality(f) = 3 AND f[2] ~ '^[0-9]+$' AND f[3] ~ '^[0-9]+$'
       AND now_us >= f[2]::bigint AND now_us - f[2]::bigint < window_us THEN
      PERFORM set_config('dlock_sql.stale_log',
                         overlay(st PLACING concat_ws(':', f[1], f[2], f[3]::bigint + 1) FROM p + 1 FOR length(e)),
                         false);
      RETURN;
    END IF;
  ELSIF now_us < full_until AND now_us >= full_until - window_us THEN
    PERFORM set_config('dlock_sql.stale_log',
                       overlay(st PLACING concat_ws(':', others + 1, full_until) FROM 1 FOR length(head)),
                       false);
    RETURN;
  END IF;

  SELECT coalesce(array_agg(ARRAY[split_part(x, ':', 1)::bigint, split_part(x, ':', 2)::bigint,
                                  split_part(x, ':', 3)::bigint] ORDER BY o), '{}')
    INTO slots
    FROM unnest((string_to_array(st, ';'))[2:]) WITH ORDINALITY u(x, o)
   WHERE x ~ '^-?[0-9]+:[0-9]+:[0-9]+$';
  n := coalesce(array_length(slots, 1), 0);
  FOR i IN 1 .. n LOOP
    IF slots[i][1] = key THEN
      mine := i;
    -- a slot out of its window (a clock set back does not keep one in it),
    -- the least recently logged first
    ELSIF (now_us < slots[i][2] OR now_us - slots[i][2] >= window_us)
          AND (spare IS NULL OR slots[i][2] < slots[spare][2]) THEN
      spare := i;
    END IF;
  END LOOP;
  IF mine IS NOT NULL THEN
    unlogged := slots[mine][3];
  ELSIF n < names_max THEN
    slots := slots || ARRAY[ARRAY[key, 0, 0]];
    mine := n + 1;
  ELSIF spare IS NOT NULL THEN
    others := others + slots[spare][3];            -- its name is forgotten
    mine := spare;
    slots[mine][1] := key;
  END IF;
  IF mine IS NULL THEN
    -- every slot in its window: the earliest to leave it says until when
    others := others + 1;
    SELECT min(slots[i][2]) + window_us INTO full_until FROM generate_subscripts(slots, 1) i;
  ELSE
    slots[mine][2] := now_us;
    slots[mine][3] := 0;
    IF end_reason = 'released' THEN
      ended := format('was released %s s ago', round(extract(epoch FROM now - ended_at)::numeric, 1));
    ELSIF end_reason IS NOT NULL THEN
      ended := format('was force-released %s s ago', round(extract(epoch FROM now - ended_at)::numeric, 1));
    ELSIF expires_at <= now THEN
      ended := format('expired %s s ago', round(extract(epoch FROM now - expires_at)::numeric, 1));
    ELSE
      ended := 'ended with its session (noticed now)';
    END IF;
    gone := CASE
      WHEN unlogged > 0 AND others > 0
        THEN format('; stale checks not logged meanwhile: %s of this lease, %s of other leases', unlogged, others)
      WHEN unlogged > 0 THEN format('; stale checks not logged meanwhile: %s of this lease', unlogged)
      WHEN others > 0 THEN format('; stale checks not logged meanwhile: %s of other leases', others)
      ELSE '' END;
    others := 0;
    full_until := 0;
    RAISE LOG USING MESSAGE = format(
      'dlock.fence() returned false for stale token %s of lease "%s": no live lease, lease %s %s%s',
      token, name, token, ended, gone);
  END IF;
  PERFORM set_config('dlock_sql.stale_log',
                     array_to_string(concat_ws(':', others, full_until) || ARRAY(
                         SELECT concat_ws(':', slots[i][1], slots[i][2], slots[i][3])
                           FROM generate_subscripts(slots, 1) i ORDER BY i), ';'),
                     false);
END
$$;

CREATE FUNCTION dlock.fence(name text, token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
  h pg_catalog.int8;
  k pg_catalog.text;
  cache pg_catalog.text;
  r record;
BEGIN
  IF name IS NULL THEN RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'lease name must not be null'; END IF;
  IF name OPERATOR(pg_catalog.=) '' THEN RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = 'lease name must not be empty'; END IF;
  IF pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 1024 THEN RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = 'lease name is too long', DETAIL = pg_catalog.format('The name is %s bytes long; the limit is %s bytes.', pg_catalog.octet_length(name), 1024); END IF;
  IF token IS NULL THEN RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'token must not be null'; END IF;

  h := dlock.name_key(name);
  k := pg_catalog.format(',%s/%s/%s,', token, h, 'dlock.lease_state'::pg_catalog.regclass::pg_catalog.oid);
  cache := pg_catalog.current_setting('dlock_sql.fence_cache', true);
  IF cache IS NOT NULL AND pg_catalog.strpos(cache, k) OPERATOR(pg_catalog.>) 0 THEN
    RETURN true;
  END IF;

  SELECT f.slot, f.expires_at, f.ended_at, f.session_bound, f.holder_pid, f.end_reason INTO r
    FROM dlock._fence_rows f
   WHERE f.name OPERATOR(pg_catalog.=) fence.name AND f.token OPERATOR(pg_catalog.=) fence.token;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF r.ended_at IS NOT NULL
     OR r.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
     OR (r.session_bound AND NOT dlock._alive(token, r.holder_pid)) THEN
    PERFORM dlock._stale_report(name, token, h, r.ended_at, r.end_reason, r.expires_at);
    RETURN false;
  END IF;

  -- Live: pin it (the name's lock for slot 0, the token's own lock for the
  -- others), which waits for a grant of it being committed, and read again
  IF r.slot OPERATOR(pg_catalog.=) 0 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(h OPERATOR(pg_catalog.#) 7535459766080761307);        -- dlock._k('n1')
  ELSE
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(token OPERATOR(pg_catalog.#) -502485852508795792);     -- dlock._k('pin')
  END IF;
  SELECT f.slot, f.expires_at, f.ended_at, f.session_bound, f.holder_pid, f.row_xmax, f.end_reason INTO r
    FROM dlock._fence_rows f
   WHERE f.name OPERATOR(pg_catalog.=) fence.name AND f.token OPERATOR(pg_catalog.=) fence.token;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF r.ended_at IS NOT NULL
     OR r.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
     OR (r.session_bound AND NOT dlock._alive(token, r.holder_pid)) THEN
    PERFORM dlock._stale_report(name, token, h, r.ended_at, r.end_reason, r.expires_at);
    RETURN false;
  END IF;
  IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
     AND r.row_xmax::pg_catalog.text OPERATOR(pg_catalog.<>) '0'
     AND dlock._xid_status(r.row_xmax) OPERATOR(pg_catalog.=) 'committed' THEN
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
      MESSAGE = 'could not serialize access due to concurrent update',
      DETAIL = pg_catalog.format('Lease "%s" changed after this transaction took its snapshot.', name);
  END IF;
  PERFORM pg_catalog.set_config('dlock_sql.fence_cache', pg_catalog.concat(cache, k), true);
  RETURN true;
END
$$;
COMMENT ON FUNCTION dlock.fence(text, bigint) IS
  'True iff token is the current live grant of name. Once true, no new grant of name can commit until this transaction ends. Put it in the WHERE clause of the writes the lease guards.';

--
-- dlock.leases: one row per holder of a name, with its state now, judged
-- by the same rules as the functions (dlock._classify) at one reading of
-- the clock.  It reads the table with its owner's rights, through the
-- caller's snapshot; owner is shown for leases whose holder role the
-- caller has the privileges of.
--
CREATE VIEW dlock.leases AS
SELECT s.name COLLATE "C" AS name,
       s.token,
       CASE WHEN dlock._may_act(s.holder_role, (SELECT r.oid FROM pg_catalog.pg_roles r
                                                 WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER))
            THEN s.owner END AS owner,
       s.holder_role::pg_catalog.regrole AS holder_role,
       s.acquired_at,
       s.expires_at,
       (c.c).state AS state,
       s.ended_at,
       (c.c).grantable_at AS grantable_at,
       pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', s.lock_delay)) AS lock_delay,
       s.session_bound,
       s.holder_pid,
       s.value,
       s.shared,
       s.max_holders
  FROM (SELECT pg_catalog.clock_timestamp() AS now) n
 CROSS JOIN dlock.lease_state s
 CROSS JOIN LATERAL (SELECT dlock._classify(s, n.now) AS c) c;
COMMENT ON VIEW dlock.leases IS
  'Leases by name and holder. state: live, expired, released, force_released or session_ended. grantable_at: when the name can next be granted without a release (NULL: now).';
GRANT SELECT ON dlock.leases TO PUBLIC;

CREATE FUNCTION dlock.lease_states(
  OUT name text, OUT token bigint, OUT owner text,
  OUT holder_role pg_catalog.regrole, OUT acquired_at timestamptz,
  OUT expires_at timestamptz, OUT state text, OUT ended_at timestamptz,
  OUT grantable_at timestamptz, OUT lock_delay interval,
  OUT session_bound boolean, OUT holder_pid integer, OUT value text,
  OUT shared boolean, OUT max_holders integer)
RETURNS SETOF record
LANGUAGE sql STRICT VOLATILE PARALLEL UNSAFE
AS $$ SELECT l.* FROM dlock.leases l $$;
COMMENT ON FUNCTION dlock.lease_states() IS
  'Every lease (one row per holder of a name) with its state now, as the lease functions see it: the rows of dlock.leases. owner is NULL for leases of roles whose privileges the caller does not have.';

--
-- dlock.purge() (src/purge.c): the rows of names whose leases all ended at
-- least older_than ago, past their lock-delay, that nobody waits for and
-- that no open transaction (this one included) has fenced or is changing.
-- A name's three lock keys are taken in GRANT mode without waiting, and kept
-- to the end of the transaction, with the pins of its rows outside slot 0;
-- busy names are skipped.  At most a quarter of the lock table, and 3000
-- locks, are held by one call.
--
CREATE FUNCTION dlock._purge_step(older_than interval)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  us bigint;
  caller oid := dlock._caller();
BEGIN
  IF older_than IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed', MESSAGE = 'older_than must not be null';
  END IF;
  us := dlock._interval_us(older_than, 'older_than');
  IF us < 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = 'older_than must not be negative';
  END IF;
  IF NOT dlock._may_act((SELECT d.datdba FROM pg_database d WHERE d.datname = current_database()), caller) THEN
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
      MESSAGE = 'permission denied to purge leases',
      DETAIL = 'Only superusers and roles with the privileges of the database''s owner may call dlock.purge().',
      HINT = format('Call it as the owner of database "%s", or grant that role to the role that calls it.', current_database());
  END IF;
  IF pg_is_in_recovery() THEN
    RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
      MESSAGE = 'cannot execute dlock.purge() during recovery';
  END IF;
  IF current_setting('transaction_read_only')::boolean THEN
    RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
      MESSAGE = 'cannot execute dlock.purge() in a read-only transaction';
  END IF;
  IF us >= 3153600000000000 THEN      -- beyond the timestamp range: nothing
    RETURN '-infinity';
  END IF;
  RETURN clock_timestamp() - make_interval(secs => us / 1000000.0);
END
$$;

CREATE FUNCTION dlock._purge_run(cutoff timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  mine bigint[];
  budget integer;
  held integer := 0;
  purged bigint := 0;
  nm text;
  h bigint;
  rows dlock.lease_state[];
  r dlock.lease_state;
  now timestamptz;
  need integer;
  first integer;
BEGIN
  -- the keys this transaction holds: the lock manager does not make them
  -- conflict with its own requests, so they are looked for here
  SELECT coalesce(array_agg((l.classid::bigint << 32) | l.objid::bigint), '{}') INTO mine
    FROM pg_locks l
   WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.objsubid = 1 AND l.granted
     AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
  budget := greatest(least(3000,
              current_setting('max_locks_per_transaction')::bigint
              * (current_setting('max_connections')::bigint
                 + current_setting('autovacuum_max_workers')::bigint + 1
                 + current_setting('max_worker_processes')::bigint
                 + current_setting('max_wal_senders')::bigint
                 + current_setting('max_prepared_transactions')::bigint) / 4), 4);

  FOR nm IN SELECT s.name FROM dlock.lease_state s
             GROUP BY s.name
            HAVING bool_or(coalesce(s.ended_at, s.expires_at) <= cutoff)
  LOOP
    EXIT WHEN held >= budget;
    h := dlock.name_key(nm);
    CONTINUE WHEN ARRAY[h # dlock._k('n1'), h # dlock._k('n2'), h # dlock._k('n3')] && mine;
    BEGIN
      IF NOT pg_try_advisory_xact_lock(h # dlock._k('n1'))
         OR NOT pg_try_advisory_xact_lock(h # dlock._k('n2'))
         OR NOT pg_try_advisory_xact_lock(h # dlock._k('n3')) THEN
        RAISE SQLSTATE 'DLK81';
      END IF;
      -- nobody waits: the queue lock is free (taken and given back at once)
      IF NOT (SELECT CASE WHEN pg_try_advisory_lock(h # dlock._k('queue'))
                          THEN pg_advisory_unlock(h # dlock._k('queue')) ELSE false END) THEN
        RAISE SQLSTATE 'DLK81';
      END IF;
      rows := dlock._rows(nm);
      now := clock_timestamp();
      need := 3;
      FOREACH r IN ARRAY coalesce(rows, '{}') LOOP
        IF coalesce(r.ended_at, r.expires_at) > cutoff
           OR (dlock._classify(r, now)).status <> 'free' THEN
          RAISE SQLSTATE 'DLK81';
        END IF;
        IF r.slot <> 0 THEN
          need := need + 1;
        END IF;
      END LOOP;
      IF rows IS NULL THEN
        RAISE SQLSTATE 'DLK81';
      END IF;
      IF need > budget - held AND (need <= budget OR budget - held < 4) THEN
        RAISE SQLSTATE 'DLK82';
      END IF;
      -- a name that needs more than a whole budget goes in parts, its
      -- highest slots first
      first := CASE WHEN need <= budget - held THEN 1
                    ELSE cardinality(rows) - (budget - held - 3) + 1 END;
      FOR i IN first .. cardinality(rows) LOOP
        CONTINUE WHEN rows[i].slot = 0;
        IF rows[i].token # dlock._k('pin') = ANY (mine)
           OR NOT pg_try_advisory_xact_lock(rows[i].token # dlock._k('pin')) THEN
          RAISE SQLSTATE 'DLK81';
        END IF;
      END LOOP;
      DELETE FROM dlock.lease_state s
       WHERE s.name = nm AND s.slot >= rows[first].slot;
      purged := purged + 1;
      held := held + 3 + (SELECT count(*) FROM unnest(rows[first:]) x WHERE x.slot <> 0)::integer;
      EXIT WHEN first > 1;
    EXCEPTION
      WHEN SQLSTATE 'DLK81' THEN
        NULL;
      WHEN SQLSTATE 'DLK82' THEN
        EXIT;
    END;
  END LOOP;
  RETURN purged;
END
$$;

CREATE FUNCTION dlock.purge(older_than interval DEFAULT '1 day')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  cutoff timestamptz;
BEGIN
  BEGIN
    cutoff := dlock._purge_step(older_than);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  RETURN dlock._purge_run(cutoff);
END
$$;
COMMENT ON FUNCTION dlock.purge(interval) IS
  'Deletes the state of names whose lease ended (released, expired, force-released or session ended, and past its lock-delay) at least older_than ago, that nobody waits for and that no open transaction has fenced or is changing, as many as one call''s lock budget allows; returns how many. Call it again, in a new transaction, while it returns more than 0.';

--
-- Sets (src/lease_set.c): several names at once, all under one token, or
-- none.  Names are taken in the canonical order (dlock._names); every
-- name's lock is taken in SERIAL mode without waiting, every row read, and
-- the set written only when all are grantable; otherwise everything is
-- given back.  acquire_all() queues on every name in that order, and waits
-- for the leases once it heads every queue.
--
CREATE TYPE dlock._set_plan AS (
  outcome   text,                -- done, held, busy, queued
  extend    boolean,             -- done: the owner's live set, extended
  slots     integer[],
  found     boolean[],
  tokens    bigint[],            -- the rows' tokens (extend: the set's)
  now       timestamptz,
  until     timestamptz,
  blocker   integer,             -- held: a name not grantable
  busy      integer,             -- busy: the name whose lock was busy
  busy_key  bigint
);

CREATE FUNCTION dlock._set_attempt(names text[], owner text, look boolean, extend_only boolean,
                                   caller oid)
RETURNS dlock._set_plan
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  p dlock._set_plan;
  n integer := cardinality(names);
  h bigint;
  rows dlock.lease_state[];
  d dlock._decision;
  all_mine boolean := true;
  blocked boolean := false;
  k bigint;
  looked bigint[] := '{}';
BEGIN
  p.slots := '{}';
  p.found := '{}';
  p.tokens := '{}';
  p.until := '-infinity';
  IF look THEN
    -- the queues are looked at (session-level shared locks, given back
    -- right after the attempt), and the attempt made while they are held
    BEGIN
      FOR i IN 1 .. n LOOP
        IF pg_try_advisory_lock_shared(dlock.name_key(names[i]) # dlock._k('queue')) THEN
          looked := looked || (dlock.name_key(names[i]) # dlock._k('queue'));
        ELSE
          extend_only := true;
        END IF;
      END LOOP;
      p := dlock._set_attempt(names, owner, false, extend_only, caller);
      FOREACH k IN ARRAY looked LOOP
        PERFORM pg_advisory_unlock_shared(k);
        looked := looked[2:];
      END LOOP;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      FOREACH k IN ARRAY looked LOOP
        PERFORM pg_advisory_unlock_shared(k);
      END LOOP;
      RAISE;
    END;
    RETURN p;
  END IF;
  BEGIN
    FOR i IN 1 .. n LOOP
      h := dlock.name_key(names[i]);
      IF NOT pg_try_advisory_xact_lock(h # dlock._k('n2')) THEN
        p.outcome := 'busy'; p.busy := i; p.busy_key := h # dlock._k('n2');
        RAISE SQLSTATE 'DLK71';
      END IF;
      IF NOT pg_try_advisory_xact_lock(h # dlock._k('n3')) THEN
        p.outcome := 'busy'; p.busy := i; p.busy_key := h # dlock._k('n3');
        RAISE SQLSTATE 'DLK71';
      END IF;
    END LOOP;
    p.now := clock_timestamp();
    FOR i IN 1 .. n LOOP
      rows := dlock._rows(names[i]);
      d := dlock._decide(rows, false, 1, owner, names[i], p.now, caller);
      IF d.mine IS NOT NULL THEN
        -- the owner's own lease: extended, or taken into the set
        p.slots[i] := rows[d.mine].slot;
        p.found[i] := true;
        p.tokens[i] := rows[d.mine].token;
        IF p.tokens[i] <> p.tokens[1] THEN
          all_mine := false;
        END IF;
        CONTINUE;
      END IF;
      all_mine := false;
      IF d.status <> 'free' THEN
        blocked := true;
        p.blocker := i;
        p.until := greatest(p.until, d.until);
        CONTINUE;
      END IF;
      p.slots[i] := 0;
      p.found[i] := d.cand_target[1] > 0;
      p.tokens[i] := CASE WHEN d.cand_target[1] > 0 THEN rows[d.cand_target[1]].token END;
    END LOOP;
    IF all_mine THEN
      p.outcome := 'done';
      p.extend := true;
      RETURN p;
    END IF;
    IF blocked OR extend_only THEN
      p.outcome := CASE WHEN blocked THEN 'held' ELSE 'queued' END;
      RAISE SQLSTATE 'DLK71';
    END IF;
    -- the pins: an exclusive grant shares with no row, so every row's
    -- (slot 0's is the name's lock in GRANT mode), taken without waiting
    FOR i IN 1 .. n LOOP
      h := dlock.name_key(names[i]);
      FOR k IN SELECT h # dlock._k('n1')
               UNION ALL
               SELECT s.token # dlock._k('pin') FROM dlock.lease_state s
                WHERE s.name = names[i] AND s.slot <> 0
      LOOP
        IF NOT pg_try_advisory_xact_lock(k) THEN
          p.outcome := 'busy'; p.busy := i; p.busy_key := k;
          RAISE SQLSTATE 'DLK71';
        END IF;
      END LOOP;
    END LOOP;
    p.outcome := 'done';
    p.extend := false;
  EXCEPTION WHEN SQLSTATE 'DLK71' THEN
    RETURN p;
  END;
  RETURN p;
END
$$;

CREATE FUNCTION dlock._set_write(names text[], ttl_us bigint, owner text, lock_delay_us bigint,
                                 p dlock._set_plan, caller oid)
RETURNS SETOF dlock.lease
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  t bigint;
  now timestamptz;
  exp timestamptz;
  l dlock.lease;
BEGIN
  IF p.extend THEN
    exp := p.now + ttl_us * interval '1 microsecond';
    FOR i IN 1 .. cardinality(names) LOOP
      UPDATE dlock.lease_state s SET expires_at = exp
       WHERE s.name = names[i] AND s.slot = p.slots[i]
      RETURNING s.name, s.owner, s.token, s.expires_at INTO l;
      RETURN NEXT l;
    END LOOP;
    PERFORM dlock._fence_forget();
    RETURN;
  END IF;
  t := dlock._token_next();
  now := clock_timestamp();
  exp := now + ttl_us * interval '1 microsecond';
  FOR i IN 1 .. cardinality(names) LOOP
    IF p.found[i] AND t <= p.tokens[i] THEN
      RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
        MESSAGE = format('token counter is behind lease "%s"', names[i]),
        DETAIL = format('The counter gave token %s, but the lease already had token %s.', t, p.tokens[i]),
        HINT = 'Advance the counter with SELECT setval(''dlock.token_seq'', (SELECT max(token) FROM dlock.lease_state)).';
    END IF;
    IF p.found[i] THEN
      UPDATE dlock.lease_state s
         SET token = t, owner = _set_write.owner, holder_role = caller::regrole, acquired_at = now,
             expires_at = exp, ended_at = NULL, end_reason = NULL,
             lock_delay = lock_delay_us * interval '1 microsecond',
             session_bound = false, holder_pid = NULL, value = NULL, shared = false, max_holders = 1
       WHERE s.name = names[i] AND s.slot = p.slots[i];
    ELSE
      INSERT INTO dlock.lease_state AS s
             (name, token, owner, holder_role, acquired_at, expires_at, lock_delay,
              session_bound, slot, shared, max_holders)
      VALUES (names[i], t, _set_write.owner, caller::regrole, now, exp,
              lock_delay_us * interval '1 microsecond', false, p.slots[i], false, 1)
      ON CONFLICT DO NOTHING;
      IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
          MESSAGE = 'could not serialize access due to concurrent update',
          DETAIL = format('Lease "%s" was granted after this transaction took its snapshot.', names[i]);
      END IF;
    END IF;
    l.name := names[i];
    l.owner := owner;
    l.token := t;
    l.expires_at := exp;
    RETURN NEXT l;
  END LOOP;
  IF dlock._setting_on('dlock.durable_grants', true)
     AND current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;
  PERFORM dlock._fence_forget();
END
$$;

CREATE TYPE dlock._set_step AS (
  names         text[],
  ttl_us        bigint,
  owner         text,
  lock_delay_us bigint,
  p             dlock._set_plan,
  caller        oid
);

CREATE FUNCTION dlock._set_timed_out(names text[], p dlock._set_plan, joined integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  i integer;
  why text;
BEGIN
  IF joined < cardinality(names) THEN
    i := joined + 1;
    why := 'other sessions are waiting for it ahead of this one';
  ELSIF p.outcome = 'busy' THEN
    i := p.busy;
    why := 'it is being changed, or a transaction still has writes fenced under its previous grant';
  ELSE
    i := p.blocker;
    why := 'another owner holds it, or it is in its lock-delay';
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'lock_not_available',
    MESSAGE = format('could not acquire all %s leases within the timeout', cardinality(names)),
    DETAIL = format('Lease "%s" was not available: %s. None of the leases was granted.', names[i], why);
END
$$;

CREATE FUNCTION dlock._set_step(names text[], ttl interval, owner text, timeout interval,
                                wait boolean, funcname text)
RETURNS dlock._set_step
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  s dlock._set_step;
  p dlock._set_plan;
  deadline timestamptz := '-infinity';
  joined integer := 0;
  trying integer := 0;
  head_since timestamptz;
  qk bigint;
BEGIN
  s.names := dlock._names(names);
  s.ttl_us := dlock._ttl_us(ttl);
  s.owner := dlock._owner(owner, true);
  s.lock_delay_us := dlock._lock_delay_us(NULL);
  IF wait THEN
    deadline := dlock._deadline(dlock._timeout_us(timeout));
  END IF;
  PERFORM dlock._writable(funcname);
  s.caller := dlock._caller();

  p := dlock._set_attempt(s.names, s.owner, true, false, s.caller);
  s.p := p;
  IF p.outcome = 'done' OR NOT wait THEN
    RETURN s;
  END IF;
  IF deadline = '-infinity' AND p.outcome = 'queued' THEN
    PERFORM dlock._set_timed_out(s.names, p, 0);
  END IF;

  BEGIN
    FOR i IN 1 .. cardinality(s.names) LOOP
      qk := dlock.name_key(s.names[i]) # dlock._k('queue');
      trying := i;
      IF NOT dlock._session_lock(qk, true, deadline) THEN
        RAISE SQLSTATE 'DLK72';
      END IF;
      joined := i;
    END LOOP;
    head_since := clock_timestamp();
    LOOP
      p := dlock._set_attempt(s.names, s.owner, false, false, s.caller);
      EXIT WHEN p.outcome = 'done'
             OR (deadline IS NOT NULL AND clock_timestamp() >= deadline);
      IF p.outcome = 'busy' THEN
        -- wait for that one lock alone, holding no other name lock
        EXIT WHEN NOT dlock._wait_free(p.busy_key, true, deadline);
      ELSE
        PERFORM dlock._sleep(p.until, deadline, head_since);
      END IF;
    END LOOP;
    FOR i IN 1 .. joined LOOP
      PERFORM pg_advisory_unlock(dlock.name_key(s.names[i]) # dlock._k('queue'));
    END LOOP;
    joined := -1;
  EXCEPTION
    -- up to the queue being joined: an error (a cancel, lock_timeout) may
    -- have come after its lock was granted and before joined said so
    WHEN SQLSTATE 'DLK72' THEN
      FOR i IN 1 .. greatest(joined, trying) LOOP
        PERFORM dlock._unlock_session(dlock.name_key(s.names[i]) # dlock._k('queue'), true);
      END LOOP;
    WHEN OTHERS OR query_canceled THEN
      FOR i IN 1 .. greatest(joined, trying) LOOP
        PERFORM dlock._unlock_session(dlock.name_key(s.names[i]) # dlock._k('queue'), true);
      END LOOP;
      RAISE;
  END;
  IF joined >= 0 THEN
    PERFORM dlock._set_timed_out(s.names, p, joined);
  END IF;
  IF p.outcome <> 'done' THEN
    PERFORM dlock._set_timed_out(s.names, p, cardinality(s.names));
  END IF;
  s.p := p;
  RETURN s;
END
$$;

--
-- dlock.watch() (src/watch.c): reads the name's rows through a fresh
-- snapshot, without any lock of the name, and sleeps until the live lease
-- expires, reading again every dlock._poll() of its wait (no commit wakes it in the SQL
-- edition).  It holds the name's watch lock, a session-level shared lock,
-- while it watches, so that dlock.locks shows it.
--
CREATE FUNCTION dlock._watch(name text, token bigint, deadline timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  wk bigint := dlock.name_key(name) # dlock._k('watch');
  live_token bigint;
  earliest timestamptz;
  now timestamptz;
  since timestamptz := clock_timestamp();
BEGIN
  BEGIN
    PERFORM pg_advisory_lock_shared(wk);
    LOOP
      now := clock_timestamp();
      SELECT t.token, t.earliest INTO live_token, earliest
        FROM (SELECT s.token, min(s.expires_at) OVER () AS earliest
                FROM unnest(dlock._rows(name)) s
               WHERE (dlock._classify(s, now)).status = 'live'
               ORDER BY s.token DESC LIMIT 1) t;
      EXIT WHEN (live_token IS NULL) <> (token IS NULL) OR live_token <> token;
      EXIT WHEN deadline = '-infinity' OR (deadline IS NOT NULL AND clock_timestamp() >= deadline);
      PERFORM dlock._sleep(earliest, deadline, since);
    END LOOP;
    PERFORM pg_advisory_unlock_shared(wk);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- held or not: a cancel or lock_timeout may have come as the lock was
    -- granted, which PostgreSQL then keeps
    PERFORM dlock._unlock_session(wk, false);
    RAISE;
  END;
  IF (live_token IS NULL) <> (token IS NULL) OR live_token <> token THEN
    RETURN live_token;
  END IF;
  RETURN token;
END
$$;

CREATE FUNCTION dlock.try_acquire_all(names text[], ttl interval, owner text DEFAULT NULL)
RETURNS SETOF dlock.lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 4
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  s dlock._set_step;
BEGIN
  BEGIN
    s := dlock._set_step(names, ttl, owner, NULL, false, 'dlock.try_acquire_all');
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  IF (s.p).outcome = 'done' THEN
    RETURN QUERY SELECT * FROM dlock._set_write(s.names, s.ttl_us, s.owner, s.lock_delay_us, s.p, s.caller);
  END IF;
END
$$;
COMMENT ON FUNCTION dlock.try_acquire_all(text[], interval, text) IS
  'Grants a lease of every distinct name for ttl at once, all under one token (one row per name), or returns no rows and changes nothing; never blocks.';

CREATE FUNCTION dlock.acquire_all(names text[], ttl interval, owner text DEFAULT NULL,
                                  timeout interval DEFAULT NULL)
RETURNS SETOF dlock.lease
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 4
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  s dlock._set_step;
BEGIN
  BEGIN
    s := dlock._set_step(names, ttl, owner, timeout, true, 'dlock.acquire_all');
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  RETURN QUERY SELECT * FROM dlock._set_write(s.names, s.ttl_us, s.owner, s.lock_delay_us, s.p, s.caller);
END
$$;
COMMENT ON FUNCTION dlock.acquire_all(text[], interval, text, interval) IS
  'Grants a lease of every distinct name for ttl, all under one token, waiting in arrival order on each name; never deadlocks with other acquires. Raises 55P03, holding none of them, when the timeout passes.';

CREATE FUNCTION dlock.release_all(names text[], owner text)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  s dlock._step;
  n text[];
  o text;
  caller oid;
  ps dlock._plan[] := '{}';
  released integer := 0;
BEGIN
  BEGIN
    n := dlock._names(names);
    o := dlock._owner(owner, false);
    IF dlock._setting_on('dlock.lazy_release', false) THEN
      RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
        MESSAGE = 'dlock.lazy_release needs the C edition of dlock',
        DETAIL = 'A lazy release is decided at commit, by a transaction callback that the SQL edition of dlock has none of.',
        HINT = 'Set dlock.lazy_release to off (a release then commits with the caller''s synchronous_commit), or install the C edition.';
    END IF;
    PERFORM dlock._writable('dlock.release_all');
    caller := dlock._caller();
    FOR i IN 1 .. cardinality(n) LOOP
      ps[i] := dlock._held(n[i], dlock.name_key(n[i]), o, caller);
    END LOOP;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  FOR i IN 1 .. cardinality(n) LOOP
    CONTINUE WHEN (ps[i]).outcome IS NULL;
    UPDATE dlock.lease_state t SET ended_at = (ps[i]).now, end_reason = 'released'
     WHERE t.name = n[i] AND t.slot = (ps[i]).slot;
    PERFORM dlock._ended(n[i], ARRAY[(ps[i]).slot]);
    released := released + 1;
  END LOOP;
  IF released > 0 THEN
    PERFORM dlock._fence_forget();
  END IF;
  RETURN released;
END
$$;
COMMENT ON FUNCTION dlock.release_all(text[], text) IS
  'Releases each of the names whose lease owner holds live; returns how many it released.';

CREATE FUNCTION dlock.watch(name text, token bigint, timeout interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  e_state text;
  e_msg text;
  e_detail text;
  e_hint text;
  n text;
  us bigint;
  deadline timestamptz;
BEGIN
  BEGIN
    n := dlock._check_name(name, 'lease name');
    us := dlock._timeout_us(timeout);
    -- a timeout of 100 years or more never passes, as in dlock._deadline()
    -- (clock_timestamp() plus one beyond 292,000 years is out of range)
    deadline := CASE WHEN us = 0 THEN '-infinity'::timestamptz
                     WHEN us > 0 AND us < 3153600000000000
                       THEN clock_timestamp() + make_interval(secs => us / 1000000.0) END;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_msg = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg; ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail; ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, HINT = e_hint; ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_msg, DETAIL = e_detail, HINT = e_hint; END IF;
  END;
  RETURN dlock._watch(n, token, deadline);
END
$$;
COMMENT ON FUNCTION dlock.watch(text, bigint, interval) IS
  'Returns as soon as the live token of name differs from token: the live token, or NULL when no lease is live (token NULL: waits for a live lease). Returns token when the timeout passes first; timeout NULL waits until cancelled.';

--
-- Statistics live in shared memory, which only the C edition (preloaded)
-- has: reading them is an error, not an empty view.
--
CREATE FUNCTION dlock.stats(
  OUT name text, OUT grants bigint, OUT refusals bigint, OUT renewals bigint,
  OUT waits bigint, OUT wait_time_total_ms double precision,
  OUT wait_time_max_ms double precision, OUT timeouts bigint,
  OUT released bigint, OUT expired bigint, OUT force_released bigint,
  OUT session_ended bigint, OUT fence_ok bigint, OUT fence_refused bigint,
  OUT last_grant_at timestamptz, OUT since timestamptz)
RETURNS SETOF record
LANGUAGE plpgsql STRICT VOLATILE PARALLEL SAFE
AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
    MESSAGE = 'dlock statistics need the C edition of dlock',
    DETAIL = 'The statistics live in shared memory, which only the C edition of dlock reserves, when the server loads it at start.',
    HINT = 'Install the C edition (CREATE EXTENSION dlock) with dlock in shared_preload_libraries.';
END
$$;
COMMENT ON FUNCTION dlock.stats() IS
  'Per-name statistics: the rows of dlock.stats. Needs the C edition of dlock, preloaded (0A000 here).';

CREATE VIEW dlock.stats AS
SELECT s.name, s.grants, s.refusals, s.renewals, s.waits,
       s.wait_time_total_ms, s.wait_time_max_ms, s.timeouts, s.released,
       s.expired, s.force_released, s.session_ended, s.fence_ok,
       s.fence_refused, s.last_grant_at, s.since
  FROM dlock.stats() s;
COMMENT ON VIEW dlock.stats IS
  'Per-name statistics. Needs the C edition of dlock, preloaded (0A000 here).';
GRANT SELECT ON dlock.stats TO PUBLIC;

CREATE FUNCTION dlock.stats_reset()
RETURNS void
LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
    MESSAGE = 'dlock statistics need the C edition of dlock',
    DETAIL = 'The statistics live in shared memory, which only the C edition of dlock reserves, when the server loads it at start.',
    HINT = 'Install the C edition (CREATE EXTENSION dlock) with dlock in shared_preload_libraries.';
END
$$;
COMMENT ON FUNCTION dlock.stats_reset() IS
  'Forgets the statistics. Needs the C edition of dlock (0A000 here).';
REVOKE EXECUTE ON FUNCTION dlock.stats_reset() FROM PUBLIC;

--
-- dlock.locks: dlock's advisory locks in pg_locks for this database,
-- decoded.  A lock is dlock's when its key is one of a known name's keys
-- (a name with a row in dlock.lease_state) or of a known token, so a
-- name's very first grant shows nothing to other sessions until it
-- commits, and a grant's owner claim is not shown.  The three keys of a
-- name's lock are shown as the C edition's modes of that lock
-- (sql-edition/README.md has the mapping).
--
DO $locks$
BEGIN
  EXECUTE pg_catalog.format($view$
CREATE VIEW dlock.locks AS
WITH l AS (
  SELECT l.pid, l.mode, l.granted, %s AS waitstart,
         (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
           OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8 AS key
    FROM pg_catalog.pg_locks l
   WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
     AND l.objsubid OPERATOR(pg_catalog.=) 1
     AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                           WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
),
n AS (
  SELECT DISTINCT s.name, dlock.name_key(s.name) AS h FROM dlock.lease_state s
),
parts AS (
  SELECT l.*, n.name, n.h,
         CASE l.key
           WHEN n.h OPERATOR(pg_catalog.#) dlock._k('n1') THEN 'n1'
           WHEN n.h OPERATOR(pg_catalog.#) dlock._k('n2') THEN 'n2'
           WHEN n.h OPERATOR(pg_catalog.#) dlock._k('n3') THEN 'n3'
           WHEN n.h OPERATOR(pg_catalog.#) dlock._k('queue') THEN 'queue'
           WHEN n.h OPERATOR(pg_catalog.#) dlock._k('watch') THEN 'watch'
           WHEN n.h OPERATOR(pg_catalog.#) dlock._k('kind') THEN 'claim'
           ELSE 'slot' END AS part
    FROM l JOIN n
      ON n.h OPERATOR(pg_catalog.=) ANY (ARRAY[
           l.key OPERATOR(pg_catalog.#) dlock._k('n1'),
           l.key OPERATOR(pg_catalog.#) dlock._k('n2'),
           l.key OPERATOR(pg_catalog.#) dlock._k('n3'),
           l.key OPERATOR(pg_catalog.#) dlock._k('queue'),
           l.key OPERATOR(pg_catalog.#) dlock._k('watch'),
           l.key OPERATOR(pg_catalog.#) dlock._k('kind')])
      OR (n.h OPERATOR(pg_catalog.&) (OPERATOR(pg_catalog.~) (1023::pg_catalog.int8 OPERATOR(pg_catalog.<<) 24)))
         OPERATOR(pg_catalog.=)
         ((l.key OPERATOR(pg_catalog.#) dlock._k('slot'))
           OPERATOR(pg_catalog.&) (OPERATOR(pg_catalog.~) (1023::pg_catalog.int8 OPERATOR(pg_catalog.<<) 24)))
),
name_locks AS (
  -- each session's keys of a name, as the modes of the name's lock
  SELECT p.pid, p.name,
         pg_catalog.bool_or(p.part OPERATOR(pg_catalog.=) 'n1' AND p.mode OPERATOR(pg_catalog.=) 'ShareLock' AND p.granted) AS n1s,
         pg_catalog.bool_or(p.part OPERATOR(pg_catalog.=) 'n1' AND p.mode OPERATOR(pg_catalog.=) 'ExclusiveLock' AND p.granted) AS n1x,
         pg_catalog.bool_or(p.part OPERATOR(pg_catalog.=) 'n2' AND p.mode OPERATOR(pg_catalog.=) 'ShareLock' AND p.granted) AS n2s,
         pg_catalog.bool_or(p.part OPERATOR(pg_catalog.=) 'n2' AND p.mode OPERATOR(pg_catalog.=) 'ExclusiveLock' AND p.granted) AS n2x,
         pg_catalog.bool_or(p.part OPERATOR(pg_catalog.=) 'n3' AND p.granted) AS n3x,
         pg_catalog.max(CASE WHEN NOT p.granted THEN p.part OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) p.mode END) AS waiting,
         pg_catalog.max(CASE WHEN NOT p.granted THEN p.waitstart END) AS waitstart
    FROM parts p
   WHERE p.part OPERATOR(pg_catalog.=) ANY ('{n1,n2,n3}'::pg_catalog.text[])
   GROUP BY p.pid, p.name
)
SELECT nl.pid, 'name'::pg_catalog.text AS kind, nl.name, NULL::pg_catalog.int8 AS token,
       m.mode, m.granted, CASE WHEN NOT m.granted THEN nl.waitstart END AS waitstart
  FROM name_locks nl
 CROSS JOIN LATERAL (VALUES
       ('AccessShareLock', nl.n1s, true),
       ('RowExclusiveLock', nl.n2s, true),
       ('ShareUpdateExclusiveLock', nl.n3x AND NOT nl.n2x, true),
       ('ShareRowExclusiveLock', nl.n2x AND nl.n3x, true),
       ('AccessExclusiveLock', nl.n1x, true),
       (CASE nl.waiting
          WHEN 'n1:ShareLock' THEN 'AccessShareLock'
          WHEN 'n1:ExclusiveLock' THEN 'AccessExclusiveLock'
          WHEN 'n2:ShareLock' THEN 'RowExclusiveLock'
          WHEN 'n2:ExclusiveLock' THEN 'ShareRowExclusiveLock'
          ELSE CASE WHEN nl.n2x THEN 'ShareRowExclusiveLock' ELSE 'ShareUpdateExclusiveLock' END END,
        nl.waiting IS NOT NULL, false)) m(mode, present, granted)
 WHERE m.present
UNION ALL
SELECT p.pid,
       CASE p.part WHEN 'queue' THEN 'queue' WHEN 'watch' THEN 'watch' ELSE 'claim' END,
       CASE WHEN p.part OPERATOR(pg_catalog.=) ANY ('{queue,watch}'::pg_catalog.text[]) THEN p.name END,
       NULL::pg_catalog.int8,
       CASE WHEN p.part OPERATOR(pg_catalog.=) 'queue' AND p.mode OPERATOR(pg_catalog.=) 'ShareLock' THEN 'RowShareLock'
            WHEN p.part OPERATOR(pg_catalog.=) 'watch' THEN 'AccessShareLock'
            ELSE p.mode END,
       p.granted, p.waitstart
  FROM parts p
 WHERE NOT p.part OPERATOR(pg_catalog.=) ANY ('{n1,n2,n3}'::pg_catalog.text[])
UNION ALL
SELECT l.pid,
       CASE WHEN t.token OPERATOR(pg_catalog.=) (l.key OPERATOR(pg_catalog.#) dlock._k('pin')) THEN 'pin' ELSE 'session' END,
       t.name, t.token,
       CASE WHEN t.token OPERATOR(pg_catalog.=) (l.key OPERATOR(pg_catalog.#) dlock._k('pin'))
            THEN CASE l.mode WHEN 'ShareLock' THEN 'AccessShareLock' ELSE 'AccessExclusiveLock' END
            ELSE l.mode END,
       l.granted, l.waitstart
  FROM l JOIN dlock.lease_state t
    ON t.token OPERATOR(pg_catalog.=) ANY (ARRAY[l.key OPERATOR(pg_catalog.#) dlock._k('pin'),
                                                  l.key OPERATOR(pg_catalog.#) dlock._k('session')])
UNION ALL
SELECT l.pid, 'epoch', NULL, NULL, l.mode, l.granted, l.waitstart
  FROM l
 WHERE l.key OPERATOR(pg_catalog.=) dlock._k('epoch')
$view$,
    CASE WHEN pg_catalog.current_setting('server_version_num')::pg_catalog.int4 OPERATOR(pg_catalog.>=) 140000
         THEN 'l.waitstart' ELSE 'NULL::pg_catalog.timestamptz' END);
END
$locks$;
COMMENT ON VIEW dlock.locks IS
  'dlock''s locks in pg_locks for this database. kind: name (a name''s state, in the C edition''s modes of the conflict rule: AccessShareLock for a true fence, RowExclusiveLock for a grant made alongside others of its kind, ShareUpdateExclusiveLock for a renew or release, ShareRowExclusiveLock for any other grant or a force_release, AccessExclusiveLock for a grant into slot 0 or a purge), queue (ExclusiveLock: the head of the name''s queue of waiters; RowShareLock: a look at it), session (ExclusiveLock of a session-bound holder, key token), watch (AccessShareLock of a session in dlock.watch()), pin (the token of a shared lease or permit outside slot 0), claim (a slot or a name''s first kind claimed by a writer; name NULL) or epoch (ExclusiveLock while the token counter moves up to the clock). name: the lease name, once it has a committed row. waitstart: since when a lock that is not granted has been waited for.';
GRANT SELECT ON dlock.locks TO PUBLIC;

--
-- A write to dlock.lease_state that dlock's functions did not make (the
-- owner's own DML, a COPY into it) makes this backend forget the fence
-- answers of its transaction, as the C edition's trigger does (the SQL
-- edition keeps no other copy of the rows); dlock's own writes fire it too,
-- which changes nothing
--
CREATE FUNCTION dlock.lease_state_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  PERFORM dlock._fence_forget();
  RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION dlock.lease_state_changed() FROM PUBLIC;
CREATE TRIGGER lease_state_changed
  AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON dlock.lease_state
  FOR EACH STATEMENT
  WHEN (pg_catalog.current_setting('dlock_sql.fence_cache', true) OPERATOR(pg_catalog.<>) '')
  EXECUTE FUNCTION dlock.lease_state_changed();

-- How full the pollers' places are: they need the C edition
CREATE FUNCTION dlock.queue_places(OUT places_live integer, OUT places_max integer,
                                   OUT fullest_role_places integer, OUT role_share integer)
RETURNS record
LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
    MESSAGE = 'places in queues need the C edition of dlock',
    DETAIL = 'Places are kept in shared memory between calls, which the SQL edition of dlock has none of.',
    HINT = 'Install the C edition (CREATE EXTENSION dlock) with dlock in shared_preload_libraries.';
END
$$;
COMMENT ON FUNCTION dlock.queue_places() IS
  'The places kept by try_acquire(queue => true). Needs the C edition of dlock (0A000 here).';

--
-- Privileges: every role may call the lease functions and read the views;
-- the helpers that the lease functions call as dlock's owner are its own.
-- The helpers that the views and dlock.fence() call run as the caller, and
-- read nothing they should not.
--
DO $privileges$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'dlock'::regnamespace
       AND p.proname LIKE '\_%'
       AND p.proname NOT IN ('_k', '_alive', '_may_act', '_classify', '_after', '_xid_status', '_fence_forget',
                             '_stale_report', '_setting_on')
  LOOP
    EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
  END LOOP;
END
$privileges$;

\if :{?dlock_inside_transaction}
\else
COMMIT;
\endif
