"""A job that must not run twice at once, with SQLAlchemy (ORM, psycopg2).

run_job waits for the lease, does the job's write under its fence in an ORM
session and releases; try_run_job does the same only if nobody holds the
lease.  The lease calls run on a connection of their own in autocommit, so
that a grant commits (and can expire) at once, whatever the session does.
"""
from datetime import timedelta

from sqlalchemy import (BigInteger, Column, Integer, Text, create_engine,
                        func, text, update)
from sqlalchemy.orm import Session, declarative_base

Base = declarative_base()


class Job(Base):
    __tablename__ = "jobs"
    id = Column(Text, primary_key=True)
    done_by = Column(BigInteger)
    runs = Column(Integer, nullable=False, default=0)


class LeaseLost(Exception):
    """The lease ended (expired, taken over) before the fenced write."""


def make_engine(url):
    return create_engine(url, future=True)


def mark_done(session, job_id, name, token):
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, func.dlock.fence(name, token))
        .values(done_by=token, runs=Job.runs + 1)
        # the default, "evaluate", cannot run dlock.fence() in Python
        .execution_options(synchronize_session="fetch"))
    if result.rowcount == 0:    # the lease is no longer ours: nothing written
        raise LeaseLost(name)


def run_job(engine, job_id, owner, ttl=timedelta(seconds=30),
            wait=timedelta(seconds=10)):
    name = f"job:{job_id}"
    with engine.connect().execution_options(
            isolation_level="AUTOCOMMIT") as lease:
        token = lease.execute(
            text("SELECT token FROM dlock.acquire(:name, :ttl, :owner,"
                 " timeout => :wait)"),
            {"name": name, "ttl": ttl, "owner": owner, "wait": wait},
        ).scalar_one()
        try:
            with Session(engine, future=True) as session, session.begin():
                mark_done(session, job_id, name, token)
        finally:
            lease.execute(text("SELECT dlock.release(:name, :owner)"),
                          {"name": name, "owner": owner})
    return token


def try_run_job(engine, job_id, owner, ttl=timedelta(seconds=30)):
    name = f"job:{job_id}"
    with engine.connect().execution_options(
            isolation_level="AUTOCOMMIT") as lease:
        row = lease.execute(
            text("SELECT token FROM dlock.try_acquire(:name, :ttl, :owner)"),
            {"name": name, "ttl": ttl, "owner": owner},
        ).first()
        if row is None:         # refused: another owner holds the lease
            return None
        token = row.token
        try:
            with Session(engine, future=True) as session, session.begin():
                mark_done(session, job_id, name, token)
        finally:
            lease.execute(text("SELECT dlock.release(:name, :owner)"),
                          {"name": name, "owner": owner})
    return token
