"""Alembic trees: ``control/`` for the shared control schema, ``tenant/`` for every tenant schema."""
