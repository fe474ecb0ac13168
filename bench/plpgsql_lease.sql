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
