"""Alembic environment: async engine, URL from the caller or from settings."""

import asyncio

from alembic import context
from sqlalchemy import pool
from sqlalchemy.ext.asyncio import create_async_engine

from chatgql.db import asyncpg_url
from chatgql.models import metadata

config = context.config
target_metadata = metadata


def _database_url() -> str:
    url = config.attributes.get("database_url")
    if url:
        return url
    from chatgql.settings import load_settings

    settings = load_settings()
    if settings.database_url is None:
        raise SystemExit("set CHATGQL_DATABASE_URL, or run `chatgql migrate` (embedded server)")
    return asyncpg_url(settings.database_url.get_secret_value())


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


async def _run_online() -> None:
    engine = create_async_engine(_database_url(), poolclass=pool.NullPool)
    async with engine.connect() as connection:
        # Several processes may start at once: migrate one at a time.
        await connection.exec_driver_sql("SELECT pg_advisory_lock(7261301)")
        await connection.commit()
        try:
            await connection.run_sync(_run)
            await connection.commit()
        finally:
            await connection.exec_driver_sql("SELECT pg_advisory_unlock(7261301)")
            await connection.commit()
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_database_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_online())
