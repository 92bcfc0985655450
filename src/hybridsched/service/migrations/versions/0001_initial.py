"""Initial schema: runs, tasks, task_deps, results, training_data, retrains.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("n_tasks", sa.Integer, nullable=False),
        sa.Column("sim_time", sa.Float, nullable=False),
    )
    op.create_table(
        "tasks",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("task_id", sa.Integer, primary_key=True),
        sa.Column("segment", sa.Integer, nullable=False),
        sa.Column("arrival", sa.Float, nullable=False),
        sa.Column("size", sa.Float, nullable=False),
        sa.Column("intensity", sa.Float, nullable=False),
        sa.Column("memory_mb", sa.Float, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("deadline", sa.Float, nullable=True),
        sqlite_with_rowid=False,  # one B-tree keyed by the primary key: half the write work
    )
    op.create_table(
        "task_deps",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("task_id", sa.Integer, primary_key=True),
        sa.Column("parent_id", sa.Integer, primary_key=True),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "results",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("task_id", sa.Integer, primary_key=True),
        sa.Column("policy", sa.String(64), primary_key=True),
        sa.Column("device", sa.String(24), nullable=False),
        sa.Column("gpu", sa.Integer, nullable=False),
        sa.Column("fraction", sa.Float, nullable=False),
        sa.Column("ready", sa.Float, nullable=False),
        sa.Column("cpu_start", sa.Float, nullable=True),
        sa.Column("cpu_end", sa.Float, nullable=True),
        sa.Column("gpu_start", sa.Float, nullable=True),
        sa.Column("gpu_end", sa.Float, nullable=True),
        sa.Column("gpu_mem_mb", sa.Float, nullable=False),
        sa.Column("end", sa.Float, nullable=False),
        sa.Column("latency", sa.Float, nullable=False),
        sa.Column("energy_j", sa.Float, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "training_data",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("task_id", sa.Integer, nullable=False),
        sa.Column("sim_time", sa.Float, nullable=False),
        sa.Column("size", sa.Float, nullable=False),
        sa.Column("intensity", sa.Float, nullable=False),
        sa.Column("memory_mb", sa.Float, nullable=False),
        sa.Column("fraction", sa.Float, nullable=False),
        sa.Column("cpu_s", sa.Float, nullable=True),
        sa.Column("gpu_s", sa.Float, nullable=True),
    )
    op.create_index("ix_training_data_run_id", "training_data", ["run_id"])
    op.create_table(
        "retrains",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("sim_time", sa.Float, nullable=False),
        sa.Column("observed", sa.Integer, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
    )
    op.create_index("ix_retrains_run_id", "retrains", ["run_id"])


def downgrade() -> None:
    for name in ("retrains", "training_data", "results", "task_deps", "tasks", "runs"):
        op.drop_table(name)
