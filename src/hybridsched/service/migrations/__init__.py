"""Alembic migrations of the service database (applied at startup by ``persistence.Store``)."""
