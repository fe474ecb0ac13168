"""An index built without blocking writes: CREATE INDEX CONCURRENTLY, which
cannot run inside a transaction.

Not being one transaction, it can stop half-way and must be safe to run
again.  A build cut short (cancelled when the lease is lost, see env.py, or
its migrator killed) leaves the index behind INVALID: never used by
queries, perhaps still maintained by every write, and holding its name, so
that building it again fails with "relation already exists".  A build that
finished just before its migrator died leaves it valid, the version not
stamped.  So the next migrator drops an invalid index and builds it again,
and keeps a valid one.

Revision ID: 0001
"""
from alembic import op
from sqlalchemy import text

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def index_on(table, name):
    """The index `name` of `table` (its name, qualified and quoted as
    needed, and whether it is valid), or None"""
    return op.get_bind().execute(text(
        "SELECT i.indexrelid::regclass::text AS index, i.indisvalid AS valid"
        "  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = CAST(:table AS regclass) AND c.relname = :name"),
        {"table": table, "name": name}).first()


def upgrade():
    # commits the migration's transaction, runs this in autocommit, and
    # opens a new transaction for the rest (the version stamp)
    with op.get_context().autocommit_block():
        found = index_on("jobs", "jobs_done_by")
        if found is not None and found.valid:
            return              # built before, its version not stamped
        if found is not None:
            # left INVALID by a build cut short: drop it without blocking
            # writes either, then build it again
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {found.index}")
        op.create_index("jobs_done_by", "jobs", ["done_by"],
                        postgresql_concurrently=True)


def downgrade():
    with op.get_context().autocommit_block():
        op.drop_index("jobs_done_by", table_name="jobs",
                      postgresql_concurrently=True)
