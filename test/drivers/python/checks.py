"""Checks of the Python recipes (docs/drivers/python.md), with real drivers,
directly and through pgbouncer in transaction mode; test/drivers/run.sh
provides the server, pgbouncer and the environment.

For psycopg 3, psycopg2 and SQLAlchemy, each way: the worker loop writes its
row once and leaves no live lease; a refused try_run_job does nothing; a
lost lease's fenced write changes nothing and is detected.  Then the traps,
each shown to happen and then avoided: a wait bounded on the client only,
psycopg2's implicit transaction, psycopg 3's pipeline mode, SQLAlchemy's
bulk update without synchronize_session='fetch', the ttl's Python type,
psycopg 3's prepared statements through pgbouncer, dlock.allow_session_bound
set with ALTER ROLE behind pgbouncer (and whether the role can set it back
on: not in the C edition, where it is superuser-only; in the SQL edition,
where no module defines it, yes), a waiting acquire() against CREATE INDEX
CONCURRENTLY; a poller's place in the queue (try_acquire's queue => true)
through pgbouncer, which the SQL edition refuses with 0A000; and the Alembic
migration run by three processes at once, then with its lease lost in the
middle of the index build, and run again.
"""
import asyncio
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import psycopg2
from sqlalchemy import func, update
from sqlalchemy.orm import Session

import psycopg2_worker
import psycopg3_worker
import sqlalchemy_worker

DIRECT = os.environ["DLOCK_DIRECT_URL"]
BOUNCER = os.environ["DLOCK_BOUNCER_URL"]
ADMIN = os.environ["DLOCK_BOUNCER_ADMIN"]
SUPER = os.environ["DLOCK_SUPER_URL"]
EDITION = os.environ.get("DLOCK_EDITION", "c")
HERE = os.path.dirname(os.path.abspath(__file__))
failed = 0


def check(cond, what, detail=None):
    global failed
    print(("ok - " if cond else "not ok - ") + what)
    if not cond:
        failed += 1
        if detail is not None:
            print(f"#   got: {detail!r}")
    return cond


sup = psycopg.connect(SUPER, autocommit=True)


def one(sql, *args):
    return sup.execute(sql, args).fetchone()


def new_job(job_id):
    sup.execute("INSERT INTO jobs (id) VALUES (%s) ON CONFLICT (id) DO UPDATE"
                " SET done_by = NULL, runs = 0", (job_id,))


def job(job_id):
    return one("SELECT done_by, runs FROM jobs WHERE id = %s", job_id)


def lease(name):
    """(owner, token, state) of the name's lease, None if never granted"""
    return one("SELECT owner, token, state FROM dlock.leases WHERE name = %s",
               name)


def hold(name, owner, ttl):
    """Grants name to owner from the superuser's connection (either API)"""
    row = one("SELECT token FROM dlock.try_acquire(%s, %s, %s)",
              name, timedelta(seconds=ttl), owner)
    assert row is not None and row[0] is not None, f"{name} not free"
    return row[0]


def refused(conn_execute, name, owner):
    """Whether another owner's try_acquire is refused (no row, or 1.1's NULL)"""
    row = conn_execute("SELECT token FROM dlock.try_acquire(%s, '10s', %s)",
                       (name, owner)).fetchone()
    return row is None or row[0] is None


def free(name):
    sup.execute("SELECT dlock.force_release(%s)", (name,))


@contextmanager
def patched(module, attr, replacement):
    saved = getattr(module, attr)
    setattr(module, attr, replacement)
    try:
        yield saved
    finally:
        setattr(module, attr, saved)


#
# The recipes, with each driver, directly and through pgbouncer
#
DRIVERS = [
    ("psycopg 3", psycopg3_worker, psycopg3_worker.connect, lambda c: c.close()),
    ("psycopg2", psycopg2_worker, psycopg2_worker.connect, lambda c: c.close()),
    ("SQLAlchemy", sqlalchemy_worker, sqlalchemy_worker.make_engine,
     lambda e: e.dispose()),
]


def recipes(label, mod, connect, close, via, url):
    tag = f"{label} {via}"
    key = f"{label.replace(' ', '')}-{via}"
    conn = connect(url)
    try:
        # the worker loop
        job_id = f"{key}-loop"
        new_job(job_id)
        token = mod.run_job(conn, job_id, "worker-1")
        check(job(job_id) == (token, 1), f"{tag}: run_job writes the job once under its token",
              job(job_id))
        check(lease(f"job:{job_id}")[2] == "released",
              f"{tag}: run_job leaves no live lease", lease(f"job:{job_id}"))

        # refused: another owner holds the name
        job_id = f"{key}-refused"
        new_job(job_id)
        other = hold(f"job:{job_id}", "other", 10)
        calls = []

        def counting(*args):
            calls.append(args)
            return saved(*args)
        try:
            with patched(mod, "mark_done", counting) as saved:
                got = mod.try_run_job(conn, job_id, "worker-1")
            outcome = got
        except Exception as exc:        # noqa: BLE001 (what the recipe did)
            outcome = exc
        check(outcome is None and not calls and job(job_id) == (None, 0),
              f"{tag}: try_run_job refused returns None and runs no fenced write",
              (outcome, len(calls), job(job_id)))
        check(lease(f"job:{job_id}") == ("other", other, "live"),
              f"{tag}: the holder's lease is untouched", lease(f"job:{job_id}"))
        free(f"job:{job_id}")

        # lost: the lease expires and another owner takes it before the write
        job_id = f"{key}-lost"
        new_job(job_id)
        taken = []

        def late(*args):
            time.sleep(1.2)
            taken.append(hold(f"job:{job_id}", "other", 10))
            return saved(*args)
        try:
            with patched(mod, "mark_done", late) as saved:
                mod.run_job(conn, job_id, "worker-1", ttl=timedelta(seconds=1))
            outcome = None
        except mod.LeaseLost as exc:
            outcome = exc
        check(isinstance(outcome, mod.LeaseLost) and job(job_id) == (None, 0),
              f"{tag}: a lost lease's fenced write changes nothing and raises LeaseLost",
              (outcome, job(job_id)))
        check(bool(taken) and lease(f"job:{job_id}") == ("other", taken[0], "live"),
              f"{tag}: the new holder's lease survives the old worker's release",
              lease(f"job:{job_id}"))
        free(f"job:{job_id}")
    finally:
        close(conn)


for label, mod, connect, close in DRIVERS:
    for via, url in (("direct", DIRECT), ("through pgbouncer", BOUNCER)):
        recipes(label, mod, connect, close, via, url)


def one_round_trip(via, url):
    """psycopg 3's run_job_in_one_round_trip: one transaction, or nothing"""
    tag = f"psycopg 3 {via}"
    conn = psycopg3_worker.connect(url)
    try:
        job_id = f"one-rt-{via.replace(' ', '-')}"
        name = f"job:{job_id}"
        new_job(job_id)
        token = psycopg3_worker.run_job_in_one_round_trip(conn, job_id, "worker-1")
        check(job(job_id) == (None, 1) and lease(name) == ("worker-1", token, "released"),
              f"{tag}: run_job_in_one_round_trip writes once and leaves the lease released",
              (job(job_id), lease(name)))
        # one transaction: the job's row and the lease's row carry its xid
        xids = one("SELECT (SELECT xmin::text FROM jobs WHERE id = %s),"
                   " (SELECT xmin::text FROM dlock.lease_state WHERE name = %s)",
                   job_id, name)
        check(xids[0] == xids[1], f"{tag}: the grant, the write and the release commit together",
              xids)
        # a busy name: 55P03 after the wait, and nothing written
        other = hold(name, "other", 10)
        try:
            psycopg3_worker.run_job_in_one_round_trip(
                conn, job_id, "worker-1", wait=timedelta(milliseconds=200))
            outcome = None
        except psycopg.errors.LockNotAvailable as exc:
            outcome = exc
        check(outcome is not None and job(job_id) == (None, 1)
              and lease(name) == ("other", other, "live"),
              f"{tag}: a busy name raises 55P03, writes nothing and leaves the holder's lease",
              (outcome, job(job_id), lease(name)))
        free(name)
    finally:
        conn.close()


for via, url in (("direct", DIRECT), ("through pgbouncer", BOUNCER)):
    one_round_trip(via, url)


#
# Trap: a wait bounded on the client only (asyncio.wait_for) leaves acquire()
# waiting on the server, which grants the lease after the client gave up
#
async def client_side_timeouts():
    hold("trap:wait", "holder", 1.5)
    hold("trap:wait-arg", "holder", 1.5)
    hold("trap:wait-st", "holder", 1.5)
    abandoned = await psycopg.AsyncConnection.connect(DIRECT, autocommit=True)
    try:
        await asyncio.wait_for(abandoned.execute(
            "SELECT token FROM dlock.acquire('trap:wait', '30s', 'async-worker')"), 0.3)
        outcome = "returned"
    except asyncio.TimeoutError:
        outcome = "timed out"
    bounded = await psycopg.AsyncConnection.connect(DIRECT, autocommit=True)
    errors = []
    try:
        await bounded.execute("SELECT token FROM dlock.acquire('trap:wait-arg', '30s',"
                              " 'async-worker', timeout => '300ms')")
    except psycopg.Error as exc:
        errors.append(exc.sqlstate)
    await bounded.execute("SET statement_timeout = '300ms'")
    try:
        await bounded.execute(
            "SELECT token FROM dlock.acquire('trap:wait-st', '30s', 'async-worker')")
    except psycopg.Error as exc:
        errors.append(exc.sqlstate)
    await asyncio.sleep(1.8)            # the holders' leases have expired
    check(outcome == "timed out" and lease("trap:wait")[0:3:2] == ("async-worker", "live"),
          "trap shown: asyncio.wait_for gives up, and the server grants the lease after it",
          (outcome, lease("trap:wait")))
    check(errors == ["55P03", "57014"]
          and lease("trap:wait-arg")[2] == "expired" and lease("trap:wait-st")[2] == "expired",
          "trap avoided: timeout => or statement_timeout end the wait on the server, no grant",
          (errors, lease("trap:wait-arg"), lease("trap:wait-st")))
    await abandoned.close()
    await bounded.close()
    free("trap:wait")

asyncio.run(client_side_timeouts())


#
# Trap: psycopg2's implicit transaction keeps the grant uncommitted
#
implicit = psycopg2.connect(DIRECT)
cur = implicit.cursor()
cur.execute("SELECT token FROM dlock.try_acquire('trap:tx', '1s', 'tx-worker')")
granted = cur.fetchone()
time.sleep(1.3)
check(granted is not None and lease("trap:tx") is None and refused(sup.execute, "trap:tx", "other"),
      "trap shown: psycopg2 without autocommit holds an uncommitted grant past its ttl,"
      " absent from dlock.leases", (granted, lease("trap:tx")))
implicit.rollback()
cur.execute("SELECT token FROM dlock.try_acquire('trap:tx2', '1s', 'tx-worker')")
implicit.commit()
visible = lease("trap:tx2")
implicit.autocommit = True
cur.execute("SELECT token FROM dlock.try_acquire('trap:tx3', '1s', 'tx-worker')")
visible3 = lease("trap:tx3")
time.sleep(1.2)
check(visible is not None and visible[0] == "tx-worker" and visible3 is not None
      and not refused(sup.execute, "trap:tx2", "other") and not refused(sup.execute, "trap:tx3", "other"),
      "trap avoided: commit() or autocommit shows the grant at once, and it ends at its ttl",
      (visible, visible3))
implicit.close()


#
# Trap: psycopg 3's pipeline mode runs the statements up to the next sync in
# one implicit transaction
#
piped = psycopg.connect(DIRECT, autocommit=True)
with piped.pipeline() as pipeline:
    granted = piped.execute(
        "SELECT token FROM dlock.acquire('trap:pipe', '1s', 'pipe-worker')").fetchone()
    time.sleep(1.3)
    shown = (granted is not None and lease("trap:pipe") is None
             and refused(sup.execute, "trap:pipe", "other"))
check(shown, "trap shown: in a pipeline the grant stays uncommitted until the sync,"
      " past its ttl, absent from dlock.leases", (granted, lease("trap:pipe")))
with piped.pipeline() as pipeline:
    piped.execute("SELECT token FROM dlock.acquire('trap:pipe2', '1s', 'pipe-worker')")
    pipeline.sync()
    visible = lease("trap:pipe2")
check(visible is not None and visible[0] == "pipe-worker",
      "trap avoided: pipeline.sync() after acquire() commits the grant", visible)
piped.close()


#
# Trap: SQLAlchemy's bulk update with dlock.fence() in its WHERE clause
#
engine = sqlalchemy_worker.make_engine(DIRECT)
Job = sqlalchemy_worker.Job
new_job("orm")
token = hold("job:orm", "orm", 10)
fenced = (update(Job).where(Job.id == "orm", func.dlock.fence("job:orm", token))
          .values(done_by=token, runs=Job.runs + 1))
with Session(engine, future=True) as session:
    loaded = session.get(Job, "orm")
    try:
        session.execute(fenced)
        outcome = "ran"
    except Exception as exc:            # noqa: BLE001 (what SQLAlchemy does)
        outcome = f"{type(exc).__name__}: {exc}"
        session.rollback()
check("Could not evaluate current criteria in Python" in outcome and job("orm") == (None, 0),
      "trap shown: the default synchronize_session cannot evaluate dlock.fence()", outcome)
with Session(engine, future=True) as session:
    loaded = session.get(Job, "orm")
    result = session.execute(fenced.execution_options(synchronize_session="fetch"))
    in_session = (loaded.done_by, loaded.runs)
    session.commit()
check(result.rowcount == 1 and in_session == (token, 1) and job("orm") == (token, 1),
      "trap avoided: synchronize_session='fetch' runs the fence on the server and"
      " updates the loaded object", (result.rowcount, in_session, job("orm")))
free("job:orm")
engine.dispose()


#
# Trap: the ttl's type.  A timedelta is sent as an interval; a str is sent
# untyped with %s (the server casts it) but as text with psycopg 3's binary
# %b, and an int is an integer: no function takes those, cast in the SQL
#
typed = psycopg.connect(DIRECT, autocommit=True)
errors = []
for query, ttl in (("SELECT token FROM dlock.try_acquire(%s, %b, 'p')", "30s"),
                   ("SELECT token FROM dlock.try_acquire(%s, %s, 'p')", 30)):
    try:
        typed.execute(query, ("trap:ttl", ttl))
    except psycopg.errors.UndefinedFunction as exc:
        errors.append(str(exc).splitlines()[0])
check(errors == ["function dlock.try_acquire(unknown, text, unknown) does not exist",
                 "function dlock.try_acquire(unknown, smallint, unknown) does not exist"],
      "trap shown: a ttl typed text or integer finds no function", errors)
tokens = [typed.execute(query, (f"trap:ttl{i}", ttl)).fetchone() for i, (query, ttl) in enumerate((
    ("SELECT token FROM dlock.try_acquire(%s, %s, 'p')", timedelta(seconds=30)),
    ("SELECT token FROM dlock.try_acquire(%s, %b::interval, 'p')", "30s"),
    ("SELECT token FROM dlock.try_acquire(%s, make_interval(secs => %s), 'p')", 30)))]
p2 = psycopg2.connect(DIRECT)
p2.autocommit = True
with p2.cursor() as c2:
    try:
        c2.execute("SELECT token FROM dlock.try_acquire(%s, %s, 'p')", ("trap:ttl9", 30))
        p2_int = "granted"
    except psycopg2.errors.UndefinedFunction as exc:
        p2_int = str(exc).splitlines()[0]
    c2.execute("SELECT token FROM dlock.try_acquire(%s, %s, 'p')", ("trap:ttl8", "30s"))
    p2_str = c2.fetchone()
p2.close()
check(all(t is not None for t in tokens) and p2_str is not None
      and p2_int == "function dlock.try_acquire(unknown, integer, unknown) does not exist",
      "trap avoided: a timedelta, or a cast in the SQL (%s::interval, make_interval()),"
      " is granted; psycopg2 sends str as an untyped literal", (tokens, p2_int, p2_str))
typed.close()


#
# Trap: psycopg 3 prepares a statement after 5 runs (prepare_threshold), on
# the server connection it runs on; through pgbouncer in transaction mode the
# next run can land on another server connection
#
def prepared_cycles(prepare_threshold):
    """Seven lease cycles through pgbouncer; before the seventh's fenced
    write another client's transaction takes the server connection the
    worker was using, so the write runs on another.  Returns the error of
    that cycle (None if it worked) and the lease's state afterwards."""
    worker = psycopg.connect(BOUNCER, autocommit=True, prepare_threshold=prepare_threshold)
    other = psycopg.connect(BOUNCER, autocommit=True, prepare_threshold=None)
    job_id = f"prepared-{prepare_threshold}"
    new_job(job_id)
    error = None

    def busy_first(*args):
        other.execute("BEGIN")          # pgbouncer gives it the last used server
        try:
            return saved(*args)
        finally:
            other.execute("COMMIT")
    for cycle in range(7):
        if cycle < 6:
            psycopg3_worker.run_job(worker, job_id, "prepared-worker", ttl=timedelta(seconds=3))
            continue
        with patched(psycopg3_worker, "mark_done", busy_first) as saved:
            try:
                psycopg3_worker.run_job(worker, job_id, "prepared-worker",
                                        ttl=timedelta(seconds=3))
            except psycopg.Error as exc:
                error = f"{exc.sqlstate}: {str(exc).splitlines()[0]}"
    state = lease(f"job:{job_id}")
    worker.close()
    other.close()
    free(f"job:{job_id}")
    return error, state, job(job_id)


error, state, row = prepared_cycles(5)
check(error is not None and error.startswith("26000") and row[1] == 6,
      "trap shown: prepare_threshold=5 through pgbouncer fails in the middle of a cycle,"
      " after the grant: its fenced write is lost", (error, state, row))
print(f"# {error}")
error, state, row = prepared_cycles(None)
check(error is None and state[2] == "released" and row[1] == 7,
      "trap avoided: prepare_threshold=None, every cycle through pgbouncer completes",
      (error, state, row))


#
# Trap: ALTER ROLE ... SET reaches pgbouncer's server connections only when
# they are made again (RECONNECT on its admin console)
#
def session_bound(conn):
    try:
        conn.execute("SELECT token FROM dlock.try_acquire('trap:sb', '5s', 'sb',"
                     " session_bound => true)")
        conn.execute("SELECT dlock.release('trap:sb', 'sb')")
        return "granted"
    except psycopg.Error as exc:
        return exc.sqlstate


def admin(command):
    subprocess.run(["psql", "-X", "-q", "-d", ADMIN, "-c", command], check=True,
                   stdout=subprocess.DEVNULL)


pooled = psycopg3_worker.connect(BOUNCER)
before = session_bound(pooled)
sup.execute("ALTER ROLE app SET dlock.allow_session_bound = off")
try:
    stale = session_bound(pooled)
    with psycopg3_worker.connect(DIRECT) as direct:
        fresh = session_bound(direct)
    check(before == "granted" and stale == "granted" and fresh == "55000",
          "trap shown: after ALTER ROLE app SET dlock.allow_session_bound = off, pgbouncer's"
          " server connections still allow session_bound", (before, stale, fresh))
    admin("RECONNECT")
    time.sleep(0.2)
    after = session_bound(pooled)
    check(after == "55000", "trap avoided: after RECONNECT, session_bound => true fails with 55000",
          after)
finally:
    sup.execute("ALTER ROLE app RESET dlock.allow_session_bound")
    admin("RECONNECT")
pooled.close()

# Who sets it, and whether it binds the role.  The C edition defines it
# superuser-only; in the SQL edition no module defines it, so it is a
# placeholder: ALTER ROLE of it is a superuser's (as of any placeholder),
# any role may SET it, and ALTER ROLE only sets its default
def set_by_app(sql):
    with psycopg3_worker.connect(DIRECT) as own:
        try:
            own.execute(sql)
            return "set"
        except psycopg.Error as exc:
            return exc.sqlstate


by_role = set_by_app("ALTER ROLE app SET dlock.allow_session_bound = off")
sup.execute("ALTER ROLE app SET dlock.allow_session_bound = off")
try:
    with psycopg3_worker.connect(DIRECT) as own:
        before = session_bound(own)
        try:
            own.execute("SET dlock.allow_session_bound = on")
            after = session_bound(own)
        except psycopg.Error as exc:
            after = exc.sqlstate
finally:
    sup.execute("ALTER ROLE app RESET dlock.allow_session_bound")
if EDITION == "sql":
    check(by_role == "42501" and before == "55000" and after == "granted",
          "SQL edition: app may not ALTER ROLE app SET dlock.allow_session_bound (42501), and"
          " the superuser's is a default only: the role's own SET turns it back on",
          (by_role, before, after))
else:
    check(by_role == "42501" and before == "55000" and after == "42501",
          "C edition: app may not ALTER ROLE app SET dlock.allow_session_bound, nor SET it"
          " back on (42501, superuser-only)", (by_role, before, after))


#
# A poller's place in the queue through pgbouncer (try_acquire(...,
# queue => true), for waiting without holding a server connection): the C
# edition keeps it in shared memory; the SQL edition has none, and says so
#
def queued_try(conn):
    row = conn.execute("SELECT token FROM dlock.try_acquire('queue:poll', '10s', 'poller',"
                       " queue => true)").fetchone()
    return None if row is None else row[0]


held = hold("queue:poll", "holder", 10)
polling = psycopg3_worker.connect(BOUNCER)
try:
    first = queued_try(polling)
    sup.execute("SELECT dlock.release('queue:poll', 'holder')")
    outcome = (first, queued_try(polling))
except psycopg.Error as exc:
    outcome = (exc.sqlstate, str(exc).splitlines()[0])
polling.close()
if EDITION == "sql":
    check(outcome == ("0A000", "queue => true needs the C edition of dlock")
          and lease("queue:poll") == ("holder", held, "live"),
          "SQL edition: queue => true through pgbouncer raises 0A000 naming the C edition,"
          " and leaves the holder's lease as it was", (outcome, lease("queue:poll")))
else:
    check(outcome[0] is None and outcome[1] is not None and outcome[1] > held
          and lease("queue:poll") == ("poller", outcome[1], "live"),
          "C edition: queue => true through pgbouncer refuses while the name is held,"
          " then grants it to the poller once released", (outcome, lease("queue:poll")))
free("queue:poll")


#
# Trap: a session waiting in acquire() keeps a snapshot, and CREATE INDEX
# CONCURRENTLY waits for it
#
def cic_with_waiter(waiter):
    sup.execute("DROP TABLE IF EXISTS cic_demo; CREATE TABLE cic_demo (x int)")
    hold("trap:cic", "migrator", 3)
    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.3)
    builder = psycopg.connect(SUPER, autocommit=True)
    builder.execute("SET statement_timeout = '1500ms'")
    try:
        builder.execute("CREATE INDEX CONCURRENTLY cic_demo_x ON cic_demo (x)")
        outcome = "built"
    except psycopg.Error as exc:
        outcome = exc.sqlstate
    builder.close()
    free("trap:cic")
    thread.join()
    return outcome


def waits_in_acquire():
    with psycopg.connect(DIRECT, autocommit=True) as conn:
        try:
            conn.execute("SELECT dlock.acquire('trap:cic', '5s', 'next', timeout => '3s')")
        except psycopg.Error:
            pass
        conn.execute("SELECT dlock.release('trap:cic', 'next')")


def polls_try_acquire():
    with psycopg.connect(DIRECT, autocommit=True) as conn:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if conn.execute("SELECT token FROM dlock.try_acquire('trap:cic', '5s', 'next')"
                            ).fetchone() is not None:
                break
            time.sleep(0.1)
        conn.execute("SELECT dlock.release('trap:cic', 'next')")


check(cic_with_waiter(waits_in_acquire) == "57014",
      "trap shown: CREATE INDEX CONCURRENTLY waits for a session waiting in acquire()")
check(cic_with_waiter(polls_try_acquire) == "built",
      "trap avoided: with waiters that poll try_acquire, the index is built")
sup.execute("DROP TABLE cic_demo")


#
# The Alembic migration, three processes at once
#
sup.execute("DROP INDEX IF EXISTS jobs_done_by; DROP TABLE IF EXISTS alembic_version")
hold("migrations", "deployer-0", 30)
env = dict(os.environ, DATABASE_URL=DIRECT)
procs = [subprocess.Popen([sys.executable, "-m", "alembic", "-c",
                           os.path.join(HERE, "migrations", "alembic.ini"),
                           "-x", "lease_ttl=1", "-x", "lease_wait=60", "upgrade", "head"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
         for _ in range(3)]
deadline = time.monotonic() + 20
while time.monotonic() < deadline and one(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'migration-lease'")[0] < 3:
    time.sleep(0.1)
waiting = one("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'migration-lease'")[0]
# A transaction that writes jobs, open for 2.5 s: the index build waits for
# it, longer than the lease's ttl (1 s), which the migrator renews meanwhile
blocker = psycopg.connect(SUPER)
blocker.execute("LOCK TABLE jobs IN ROW EXCLUSIVE MODE")
free("migrations")
time.sleep(0.5)
early = lease("migrations")
time.sleep(1.5)
during = lease("migrations")
time.sleep(0.5)
blocker.rollback()
blocker.close()
outputs = [p.communicate(timeout=60)[0] for p in procs]
codes = [p.returncode for p in procs]
applied = sum(out.count("Running upgrade") for out in outputs)
check(waiting == 3 and codes == [0, 0, 0] and applied == 1,
      "migration: three alembic processes at once, one applies, the others find it applied",
      (waiting, codes, applied, outputs))
check(one("""SELECT count(*), bool_and(i.indisvalid) FROM pg_index i
              JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'jobs_done_by'""")
      == (1, True) and one("SELECT version_num FROM alembic_version") == ("0001",),
      "migration: the index exists once, valid, and the version is stamped")
check(early is not None and early[0].startswith("migrate-") and early[2] == "live"
      and during == early and lease("migrations")[2] == "released",
      "migration: one migrator's lease (ttl 1 s) stayed live through the 2.5 s index build,"
      " renewed, and was released", (early, during, lease("migrations")))


#
# The migration once more, its lease lost in the middle of the index build:
# the build is cancelled and leaves the index INVALID, which the next
# deployer drops and builds again
#
def deployer():
    return subprocess.Popen([sys.executable, "-m", "alembic", "-c",
                             os.path.join(HERE, "migrations", "alembic.ini"),
                             "-x", "lease_ttl=1", "-x", "lease_wait=60", "upgrade", "head"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def done_by_index():
    """[(oid, valid)] of every index named jobs_done_by"""
    return sup.execute("""SELECT i.indexrelid::oid::bigint, i.indisvalid FROM pg_index i
                            JOIN pg_class c ON c.oid = i.indexrelid
                           WHERE c.relname = 'jobs_done_by'""").fetchall()


def stamped():
    if one("SELECT to_regclass('alembic_version')")[0] is None:
        return []
    return sup.execute("SELECT version_num FROM alembic_version").fetchall()


sup.execute("DROP INDEX IF EXISTS jobs_done_by; DROP TABLE IF EXISTS alembic_version")
# the build waits for this transaction, which writes jobs, after the index
# is in the catalog (INVALID) and before it is built
blocker = psycopg.connect(SUPER)
blocker.execute("LOCK TABLE jobs IN ROW EXCLUSIVE MODE")
first = deployer()
deadline = time.monotonic() + 20
while time.monotonic() < deadline and one(
        "SELECT count(*) FROM pg_stat_progress_create_index"
        " WHERE phase = 'waiting for writers before build'")[0] == 0:
    time.sleep(0.1)
held = lease("migrations")
cut = done_by_index()
free("migrations")              # lost: force-released under the migrator
try:
    first_out = first.communicate(timeout=30)[0]
except subprocess.TimeoutExpired:
    first.kill()
    first_out = first.communicate()[0] + "\n(still running after 30 s: killed)"
blocker.rollback()
blocker.close()
left = done_by_index()
check(held is not None and held[0].startswith("migrate-") and held[2] == "live"
      and len(cut) == 1 and not cut[0][1] and first.returncode != 0
      and "canceling statement due to user request" in first_out
      and left == cut and stamped() == [],
      "migration: a lease lost in the middle of the index build cancels the build, which"
      " leaves the index INVALID and the version not stamped",
      (held, cut, first.returncode, left, stamped(), first_out))
second = deployer()
second_out = second.communicate(timeout=60)[0]
rebuilt = done_by_index()
check(second.returncode == 0 and "Running upgrade" in second_out
      and len(rebuilt) == 1 and rebuilt[0][1] and rebuilt[0][0] != cut[0][0]
      and stamped() == [("0001",)],
      "migration: the next deployer drops the INVALID index, builds it again, valid,"
      " and stamps the version", (second.returncode, rebuilt, stamped(), second_out))
# built, then the migrator died before the version was stamped
sup.execute("DELETE FROM alembic_version")
third = deployer()
third_out = third.communicate(timeout=60)[0]
check(third.returncode == 0 and "Running upgrade" in third_out
      and done_by_index() == rebuilt and stamped() == [("0001",)],
      "migration: a deployer that finds the index built but the version not stamped keeps"
      " the index and stamps the version", (third.returncode, done_by_index(), third_out))

sup.close()
sys.exit(1 if failed else 0)
