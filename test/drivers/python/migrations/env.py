"""Alembic environment: one migrator at a time, under a dlock lease.

Deployers that start at once all run `alembic upgrade head`; one applies the
migrations, the others wait for it and then find them applied (Alembic reads
the applied version only after the lease is granted).

Which lease: a migration with CREATE INDEX CONCURRENTLY is not one
transaction (autocommit_block() commits around it), so a grant that its
transaction holds until commit does not cover it.  The lease must outlive
transactions: a lease with a ttl, renewed by a thread while the migration
runs, on a connection of its own.  Not a session-bound lease with a long
ttl: the ttl would have to exceed the longest index build (hours on a big
table), and a stalled migrator would keep everyone out that long; through a
transaction pooler a session-bound lease ends under the migrator (and roles
behind one have them turned off).  A renewed short ttl frees the name soon
after a migrator dies.  If a renewal fails (the lease was lost), the
migration is cancelled rather than left to run alongside the next migrator;
a cancelled CREATE INDEX CONCURRENTLY leaves its index INVALID, which the
next migrator's run of the migration must drop and build again (see
versions/0001_jobs_done_by_index.py).

How to wait: by polling try_acquire, not in acquire().  A session waiting in
acquire() keeps a snapshot open for its whole wait, and CREATE INDEX
CONCURRENTLY waits for every transaction with an older snapshot: the
migrator would wait for its waiters, which wait for it.
"""
import os
import threading
import time
import uuid
from datetime import timedelta
from logging.config import fileConfig

import psycopg2
from alembic import context
from sqlalchemy import create_engine

fileConfig(context.config.config_file_name)
LEASE = "migrations"
x_args = context.get_x_argument(as_dictionary=True)
TTL = timedelta(seconds=float(x_args.get("lease_ttl", "30")))
WAIT = timedelta(seconds=float(x_args.get("lease_wait", "600")))


class MigrationLease:
    def __init__(self, url):
        self.conn = psycopg2.connect(url, application_name="migration-lease")
        self.conn.autocommit = True
        self.owner = f"migrate-{uuid.uuid4()}"
        self.done = threading.Event()

    def acquire(self, poll=0.2):
        deadline = time.monotonic() + WAIT.total_seconds()
        with self.conn.cursor() as cur:
            while True:
                cur.execute("SELECT token FROM dlock.try_acquire(%s, %s, %s)",
                            (LEASE, TTL, self.owner))
                if cur.fetchone() is not None:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"lease {LEASE} still held after {WAIT}")
                time.sleep(poll)

    def keep_renewed(self, on_lost):
        def renew():
            with self.conn.cursor() as cur:
                while not self.done.wait(TTL.total_seconds() / 3):
                    cur.execute("SELECT token FROM dlock.renew(%s, %s, %s)",
                                (LEASE, self.owner, TTL))
                    if cur.fetchone()[0] is None:   # lost: stop the migration
                        on_lost()
                        return
        self.thread = threading.Thread(target=renew, daemon=True)
        self.thread.start()

    def release(self):
        self.done.set()
        if getattr(self, "thread", None):
            self.thread.join()
        with self.conn.cursor() as cur:
            cur.execute("SELECT dlock.release(%s, %s)", (LEASE, self.owner))
        self.conn.close()


def run_migrations_online():
    url = os.environ["DATABASE_URL"]
    lease = MigrationLease(url)
    lease.acquire()
    try:
        engine = create_engine(url, future=True)
        with engine.connect() as connection:
            lease.keep_renewed(
                on_lost=connection.connection.driver_connection.cancel)
            context.configure(connection=connection, target_metadata=None)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        lease.release()


run_migrations_online()
