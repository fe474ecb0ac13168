"""A job that must not run twice at once, with psycopg2.

run_job waits for the lease, does the job's write under its fence and
releases; try_run_job does the same only if nobody holds the lease.  The
write goes to the table jobs (id text, done_by bigint, runs int).
"""
from datetime import timedelta

import psycopg2


class LeaseLost(Exception):
    """The lease ended (expired, taken over) before the fenced write."""


def connect(url):
    conn = psycopg2.connect(url)
    # psycopg2 opens a transaction before the first statement and keeps it
    # open until commit(): an uncommitted grant is invisible to others and
    # holds the name past its ttl.  Autocommit commits each call at once.
    conn.autocommit = True
    return conn


def mark_done(cur, job_id, name, token):
    cur.execute(
        "UPDATE jobs SET done_by = %s, runs = runs + 1"
        " WHERE id = %s AND dlock.fence(%s, %s)",
        (token, job_id, name, token))
    if cur.rowcount == 0:       # the lease is no longer ours: nothing written
        raise LeaseLost(name)


def run_job(conn, job_id, owner, ttl=timedelta(seconds=30),
            wait=timedelta(seconds=10)):
    name = f"job:{job_id}"
    with conn.cursor() as cur:
        # waits at most `wait` on the server (55P03 then)
        cur.execute(
            "SELECT token FROM dlock.acquire(%s, %s, %s, timeout => %s)",
            (name, ttl, owner, wait))
        (token,) = cur.fetchone()
        try:
            mark_done(cur, job_id, name, token)
        finally:
            cur.execute("SELECT dlock.release(%s, %s)", (name, owner))
    return token


def try_run_job(conn, job_id, owner, ttl=timedelta(seconds=30)):
    name = f"job:{job_id}"
    with conn.cursor() as cur:
        cur.execute("SELECT token FROM dlock.try_acquire(%s, %s, %s)",
                    (name, ttl, owner))
        row = cur.fetchone()
        if row is None:         # refused: another owner holds the lease
            return None
        (token,) = row
        try:
            mark_done(cur, job_id, name, token)
        finally:
            cur.execute("SELECT dlock.release(%s, %s)", (name, owner))
    return token
