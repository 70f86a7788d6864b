"""Persistence: the shared engine, the tables, migrations and the blob store."""
