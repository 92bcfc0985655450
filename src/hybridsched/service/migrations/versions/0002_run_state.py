"""What a resumed run needs besides its rows: the speed it ran at and a snapshot of its
per-policy statistics (committed with the batch it describes).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("speed", sa.Float, nullable=True))
    op.add_column("runs", sa.Column("stats", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as b:
        b.drop_column("stats")
        b.drop_column("speed")
