"""The database answers."""

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


async def ping(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT 1"))
