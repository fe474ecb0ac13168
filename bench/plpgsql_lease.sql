-- A hand-written lease with fencing tokens in PL/pgSQL: what a careful user
-- would build without dlock.  bench/compare.sh measures it next to dlock.
--
-- One row per name.  A lease is live while expires_at is in the future on the
-- server's clock (clock_timestamp(), not now(), so a long transaction does not
-- stretch it).  Every new grant takes a token from a sequence, so tokens only
-- grow; a token is valid while its row still carries it and has not expired.
-- Correct under READ COMMITTED: an UPDATE that waited for a concurrent change
-- re-checks its WHERE clause on the newest row version, and the primary key
-- lets only one of two concurrent first grants of a name insert its row.

CREATE SEQUENCE plpgsql_lease_token_seq AS bigint;

-- Only the name is indexed, and fillfactor leaves room on each page, so that
-- grants and releases are HOT updates that touch no index.
CREATE TABLE plpgsql_lease (
  name       text COLLATE "C" PRIMARY KEY,
  owner      text NOT NULL,
  token      bigint NOT NULL,
  expires_at timestamptz NOT NULL
) WITH (fillfactor = 50);

-- plpgsql_acquire: the token of a new (or, for the same owner, extended)
-- lease, or NULL when another owner holds the name.  Never waits for a live
-- lease; it may wait a moment for a concurrent grant or release to commit.
CREATE FUNCTION plpgsql_acquire(p_name text, p_ttl interval, p_owner text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  granted bigint;
BEGIN
  -- The usual case: the name has a row.  Take it when it expired or was
  -- released, or extend it when the caller already holds it (keeping the
  -- token, so a client may retry an acquire whose reply it lost).  CASE only
  -- evaluates nextval() when a new token is really needed.
  UPDATE plpgsql_lease l
     SET token = CASE WHEN l.owner = p_owner AND l.expires_at > clock_timestamp()
                      THEN l.token
                      ELSE nextval('plpgsql_lease_token_seq') END,
         owner = p_owner,
         expires_at = clock_timestamp() + p_ttl
   WHERE l.name = p_name
     AND (l.expires_at <= clock_timestamp() OR l.owner = p_owner)
  RETURNING l.token INTO granted;
  IF FOUND THEN
    RETURN granted;
  END IF;

  -- No row we could take: either the name is new, or another owner holds it.
  -- A concurrent first grant makes this INSERT wait and then do nothing.
  -- (A token is drawn even when the row exists; gaps in tokens are harmless.)
  INSERT INTO plpgsql_lease AS l (name, owner, token, expires_at)
  VALUES (p_name, p_owner, nextval('plpgsql_lease_token_seq'), clock_timestamp() + p_ttl)
  ON CONFLICT (name) DO NOTHING
  RETURNING l.token INTO granted;
  RETURN granted;
END
$$;

-- plpgsql_release: compare-and-release.  True when p_owner held a live
-- lease, which ends now; false (and no change) otherwise.  The token stays in
-- the row, but the expiry in the past makes it fail every fence check.
CREATE FUNCTION plpgsql_release(p_name text, p_owner text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE plpgsql_lease
     SET expires_at = clock_timestamp()
   WHERE name = p_name AND owner = p_owner AND expires_at > clock_timestamp();
  RETURN FOUND;
END
$$;

-- A fenced write with this lease, in the writer's own statement:
--   UPDATE t SET ... WHERE ... AND EXISTS (
--     SELECT FROM plpgsql_lease WHERE name = $1 AND token = $2
--        AND expires_at > clock_timestamp() FOR SHARE)
-- FOR SHARE keeps a regrant (an UPDATE of that row) from committing before
-- the write does, which orders the stale holder's write before the next one.

-- Shared leases (readers) of the same names, the same way: one row per
-- holder of a name, each with its own owner, token (from the same sequence)
-- and expiry.  Readers and writers meet at the name's row in plpgsql_lease,
-- which carries the exclusive lease:
--
--   plpgsql_acquire_shared locks that row FOR SHARE (readers do not block
--   one another) and grants only if it carries no live exclusive lease; the
--   row lock, held until the reader's transaction ends, keeps a writer from
--   deciding until that grant has committed;
--
--   plpgsql_acquire_writer locks that row FOR UPDATE, which waits for the
--   readers' acquires in flight and keeps new ones out, then locks the
--   name's holder rows, which waits for their releases in flight and for
--   fenced writes still running under a shared token (FOR SHARE, below), and
--   only then looks for a live shared holder: under READ COMMITTED each of
--   these statements takes its snapshot after the waits before it, so it
--   sees every commit that it waited for.
--
-- So a writer grants only when no shared lease is live and no write fenced
-- by one is still running, and a reader only when no exclusive lease is
-- live; tokens drawn under these row locks grow across kinds too.  Writers
-- of names that have shared leases must use plpgsql_acquire_writer (the
-- plain plpgsql_acquire does not look at them); both release with
-- plpgsql_release.  A holder's row stays after its release, as in
-- plpgsql_lease, so that the same owner's next grant is a HOT update: with
-- owners that come and go, expired rows need deleting now and then.
--
-- A write fenced by a shared token, in the writer's own statement:
--   UPDATE t SET ... WHERE ... AND EXISTS (
--     SELECT FROM plpgsql_shared_lease WHERE name = $1 AND owner = $2
--        AND token = $3 AND expires_at > clock_timestamp() FOR SHARE)
-- A reader that acquires again after such a write, in the same transaction,
-- can deadlock with a writer that waits for it (PostgreSQL detects that and
-- cancels one of them): renew in a transaction of its own.

CREATE TABLE plpgsql_shared_lease (
  name       text COLLATE "C",
  owner      text,
  token      bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (name, owner)
) WITH (fillfactor = 50);

-- plpgsql_acquire_shared: the token of a new (or, for the same owner,
-- extended) shared lease, or NULL while an exclusive lease is live.  May wait
-- a moment for a writer's acquire in flight to commit.
CREATE FUNCTION plpgsql_acquire_shared(p_name text, p_ttl interval, p_owner text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  writer_live boolean;
  granted bigint;
BEGIN
  -- The name's exclusive-lease row, locked; made (expired, token 0, which no
  -- grant carries) for a new name.  A concurrent first INSERT makes this one
  -- wait and do nothing; the next round then finds that row.  FOR SHARE
  -- returns the row's newest version, after waiting for a writer's change.
  LOOP
    SELECT l.expires_at > clock_timestamp() INTO writer_live
      FROM plpgsql_lease l
     WHERE l.name = p_name
       FOR SHARE;
    EXIT WHEN FOUND;
    INSERT INTO plpgsql_lease (name, owner, token, expires_at)
    VALUES (p_name, '', 0, '-infinity')
    ON CONFLICT (name) DO NOTHING;
  END LOOP;
  IF writer_live THEN
    RETURN NULL;
  END IF;

  -- This owner's row: extended (same token) while live, else a new token
  UPDATE plpgsql_shared_lease s
     SET token = CASE WHEN s.expires_at > clock_timestamp()
                      THEN s.token
                      ELSE nextval('plpgsql_lease_token_seq') END,
         expires_at = clock_timestamp() + p_ttl
   WHERE s.name = p_name AND s.owner = p_owner
  RETURNING s.token INTO granted;
  IF NOT FOUND THEN
    INSERT INTO plpgsql_shared_lease AS s (name, owner, token, expires_at)
    VALUES (p_name, p_owner, nextval('plpgsql_lease_token_seq'), clock_timestamp() + p_ttl)
    ON CONFLICT (name, owner) DO NOTHING
    RETURNING s.token INTO granted;
  END IF;
  RETURN granted;
END
$$;

-- plpgsql_release_shared: compare-and-release of p_owner's shared lease
CREATE FUNCTION plpgsql_release_shared(p_name text, p_owner text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE plpgsql_shared_lease
     SET expires_at = clock_timestamp()
   WHERE name = p_name AND owner = p_owner AND expires_at > clock_timestamp();
  RETURN FOUND;
END
$$;

-- plpgsql_acquire_writer: plpgsql_acquire for names that also have shared
-- leases: NULL while one is live.  May wait for the readers' acquires,
-- releases and fenced writes in flight.
CREATE FUNCTION plpgsql_acquire_writer(p_name text, p_ttl interval, p_owner text)
RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  -- As in plpgsql_acquire_shared: the row must exist, and be locked, before
  -- anything is decided, or a reader could make it and be granted between
  -- this writer's check and its grant
  LOOP
    PERFORM FROM plpgsql_lease WHERE name = p_name FOR UPDATE;
    EXIT WHEN FOUND;
    INSERT INTO plpgsql_lease (name, owner, token, expires_at)
    VALUES (p_name, '', 0, '-infinity')
    ON CONFLICT (name) DO NOTHING;
  END LOOP;
  PERFORM FROM plpgsql_shared_lease WHERE name = p_name FOR UPDATE;
  IF EXISTS (SELECT FROM plpgsql_shared_lease
              WHERE name = p_name AND expires_at > clock_timestamp()) THEN
    RETURN NULL;
  END IF;
  RETURN plpgsql_acquire(p_name, p_ttl, p_owner);
END
$$;
