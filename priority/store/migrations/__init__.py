"""Alembic migrations of the daemon's database (run programmatically by ``store.upgrade``)."""
