"""Alembic environment: always given a live connection by daemon.storage.migrate."""

from alembic import context

from daemon.storage.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `docex migrate`, which passes a connection")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
    compare_type=True,
)
context.run_migrations()
