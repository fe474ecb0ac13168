"""An index built without blocking writes: CREATE INDEX CONCURRENTLY, which
cannot run inside a transaction.

Revision ID: 0001
"""
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    # commits the migration's transaction, runs this in autocommit, and
    # opens a new transaction for the rest (the version stamp)
    with op.get_context().autocommit_block():
        op.create_index("jobs_done_by", "jobs", ["done_by"],
                        postgresql_concurrently=True)


def downgrade():
    with op.get_context().autocommit_block():
        op.drop_index("jobs_done_by", table_name="jobs",
                      postgresql_concurrently=True)
