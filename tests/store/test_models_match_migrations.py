"""models.py mirrors the database the migrations build: the same tables, columns, types,
nullability, indexes, unique constraints and foreign keys, as Alembic's autogenerate compares
them. A column added by a migration and not to models.py (or the other way round) fails here."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine

from chatgql.models import metadata


def _include_name(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """Alembic's own version table, and the message table's hash partitions (migration 0005:
    message_p0 .. message_p15, whose columns and indexes are the parent's), are not models."""
    if type_ == "table":
        return name != "alembic_version" and not (name or "").startswith("message_p")
    return True


def _differences(sync_connection: Any) -> list[Any]:
    context = MigrationContext.configure(
        sync_connection,
        opts={"compare_type": True, "include_name": _include_name},
    )
    return compare_metadata(context, metadata)


async def test_models_py_matches_the_migrated_database(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        differences = await conn.run_sync(_differences)
    assert differences == [], "models.py and the migrations disagree:\n" + "\n".join(map(repr, differences))
