"""A job that must not run twice at once, with psycopg 3.

run_job waits for the lease, does the job's write under its fence and
releases; try_run_job does the same only if nobody holds the lease;
run_job_in_one_round_trip, for a job that is only this write, does the
grant, the write and the release in one transaction sent at once.  The
write goes to the table jobs (id text, done_by bigint, runs int).
"""
from datetime import timedelta

import psycopg


class LeaseLost(Exception):
    """The lease ended (expired, taken over) before the fenced write."""


def connect(url):
    # autocommit: a grant is seen by others, and ends at its ttl, only once
    # committed.  prepare_threshold=None: no server-side prepared statements,
    # which a transaction pooler (pgbouncer < 1.21) does not keep per client.
    return psycopg.connect(url, autocommit=True, prepare_threshold=None)


def mark_done(conn, job_id, name, token):
    cur = conn.execute(
        "UPDATE jobs SET done_by = %s, runs = runs + 1"
        " WHERE id = %s AND dlock.fence(%s, %s)",
        (token, job_id, name, token))
    if cur.rowcount == 0:       # the lease is no longer ours: nothing written
        raise LeaseLost(name)


def run_job(conn, job_id, owner, ttl=timedelta(seconds=30),
            wait=timedelta(seconds=10)):
    name = f"job:{job_id}"
    # waits at most `wait` on the server (55P03 then): never bound it on the
    # client side only, or the server grants the lease after you gave up
    (token,) = conn.execute(
        "SELECT token FROM dlock.acquire(%s, %s, %s, timeout => %s)",
        (name, ttl, owner, wait)).fetchone()
    try:
        mark_done(conn, job_id, name, token)
    finally:
        conn.execute("SELECT dlock.release(%s, %s)", (name, owner))
    return token


def try_run_job(conn, job_id, owner, ttl=timedelta(seconds=30)):
    name = f"job:{job_id}"
    row = conn.execute(
        "SELECT token FROM dlock.try_acquire(%s, %s, %s)",
        (name, ttl, owner)).fetchone()
    if row is None:             # refused: another owner holds the lease
        return None
    (token,) = row
    try:
        mark_done(conn, job_id, name, token)
    finally:
        conn.execute("SELECT dlock.release(%s, %s)", (name, owner))
    return token


def run_job_in_one_round_trip(conn, job_id, owner, ttl=timedelta(seconds=30),
                              wait=timedelta(seconds=10)):
    name = f"job:{job_id}"
    # BEGIN, acquire, the write, release, COMMIT: one pipeline, one round
    # trip.  The write needs no fence: the grant commits with it.  A busy
    # name raises 55P03 after `wait` and the whole transaction is undone.
    with conn.pipeline(), conn.transaction():
        grant = conn.execute(
            "SELECT token FROM dlock.acquire(%s, %s, %s, timeout => %s)",
            (name, ttl, owner, wait))
        conn.execute("UPDATE jobs SET runs = runs + 1 WHERE id = %s", (job_id,))
        conn.execute("SELECT dlock.release(%s, %s)", (name, owner))
    return grant.fetchone()[0]
