-- bench_not_granted: called by a pgbench script when its acquire was not
-- granted.  SQLSTATE 40001 is the one error pgbench neither aborts the
-- client for nor hides: with --max-tries=1 it counts the cycle as failed (a
-- cycle that did no work), with --max-tries=0 it runs the script again from
-- the start, which makes a polling client whose cycle latency includes every
-- refused poll.  It runs in a transaction of its own, after the refused
-- acquire has committed, so that nothing a refused acquire locked stays
-- locked while the client pauses before its next poll.  (Its own file, for
-- databases whose dlock is the SQL edition rather than the extension.)
CREATE FUNCTION bench_not_granted() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'serialization_failure', MESSAGE = 'not granted';
END
$$;
