"""Database tables of the live service (SQLAlchemy 2 declarative; migrations in ``migrations/``).

One row per run, per task of a run (with its dependencies), per (task, policy) result, per
observation a learning policy trained on, and per retrain.  Times are simulated seconds;
``created_at``/``updated_at`` are wall-clock epoch seconds.
"""

from __future__ import annotations

from sqlalchemy import JSON, Float, ForeignKey, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base; ``Base.metadata`` is the migrations' target."""


class RunRow(Base):
    """One continuous race: its settings, status and how far it got."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # running | paused | stopped | finished | interrupted
    config: Mapped[dict] = mapped_column(JSON)  # workload, policies, seed, segment_tasks, speed
    n_tasks: Mapped[int] = mapped_column(Integer, default=0)  # tasks committed (a prefix of the stream)
    sim_time: Mapped[float] = mapped_column(Float, default=0.0)
    speed: Mapped[float | None] = mapped_column(Float, nullable=True)  # the speed it last ran at
    # RaceStats.to_dict() as of n_tasks (written with the batch that brought n_tasks): a resumed
    # run carries on its summaries instead of restarting them at n = 0
    stats: Mapped[dict | None] = mapped_column(JSON, nullable=True)


class TaskRow(Base):
    """A task of the stream (the machine kind's workload schema)."""

    __tablename__ = "tasks"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    segment: Mapped[int] = mapped_column(Integer)
    arrival: Mapped[float] = mapped_column(Float)
    size: Mapped[float] = mapped_column(Float)
    intensity: Mapped[float] = mapped_column(Float)
    memory_mb: Mapped[float] = mapped_column(Float)
    priority: Mapped[int] = mapped_column(Integer)
    deadline: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = {"sqlite_with_rowid": False}


class TaskDepRow(Base):
    """Task ``task_id`` waits for ``parent_id`` (same run)."""

    __tablename__ = "task_deps"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    parent_id: Mapped[int] = mapped_column(Integer, primary_key=True)

    __table_args__ = {"sqlite_with_rowid": False}


class ResultRow(Base):
    """One policy's decision for one task and its outcome (the per-task trace schema)."""

    __tablename__ = "results"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    policy: Mapped[str] = mapped_column(String(64), primary_key=True)
    device: Mapped[str] = mapped_column(String(24))  # placement: cpu | gpuK | cpu+gpuK
    gpu: Mapped[int] = mapped_column(Integer)
    fraction: Mapped[float] = mapped_column(Float)
    ready: Mapped[float] = mapped_column(Float)
    cpu_start: Mapped[float | None] = mapped_column(Float, nullable=True)
    cpu_end: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_start: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_end: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_mem_mb: Mapped[float] = mapped_column(Float)
    end: Mapped[float] = mapped_column(Float)
    latency: Mapped[float] = mapped_column(Float)
    energy_j: Mapped[float] = mapped_column(Float)
    cost_usd: Mapped[float] = mapped_column(Float)

    # the history's policy filter walks the primary key newest-first: no second index to maintain
    __table_args__ = {"sqlite_with_rowid": False}


class TrainingRow(Base):
    """A completion a learning policy observed (what its online update trained on)."""

    __tablename__ = "training_data"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    policy: Mapped[str] = mapped_column(String(64))
    task_id: Mapped[int] = mapped_column(Integer)
    sim_time: Mapped[float] = mapped_column(Float)
    size: Mapped[float] = mapped_column(Float)
    intensity: Mapped[float] = mapped_column(Float)
    memory_mb: Mapped[float] = mapped_column(Float)
    fraction: Mapped[float] = mapped_column(Float)
    cpu_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class RetrainRow(Base):
    """A learning policy updated its model (hybrid_ml refit, DQN gradient steps)."""

    __tablename__ = "retrains"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    policy: Mapped[str] = mapped_column(String(64))
    sim_time: Mapped[float] = mapped_column(Float)
    observed: Mapped[int] = mapped_column(Integer)  # completions in this update
    total: Mapped[int] = mapped_column(Integer)  # updates of this policy so far in the run
