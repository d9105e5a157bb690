"""models.py mirrors the database the migrations build: the same tables, columns, types,
nullability, indexes, unique constraints and foreign keys, as Alembic's autogenerate compares
them. A column added by a migration and not to models.py (or the other way round) fails here; so does a
stored send function that answers a message column under another name or type than models.py's."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from chatgql.models import MESSAGE_FIELDS, metadata


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


async def test_the_send_functions_return_message_columns_as_models_message_record_names_them(engine: AsyncEngine):
    # chat_send and chat_send_batch answer a send with the stored message's own columns (beside their outcome
    # and item number): the service builds a models.MessageRecord of them, by name.
    returned = """
        SELECT p.proname, a.name, format_type(a.type, NULL) AS type
          FROM pg_proc p
          CROSS JOIN LATERAL unnest(p.proargnames, p.proargmodes::text[], p.proallargtypes) AS a(name, mode, type)
         WHERE p.proname IN ('chat_send', 'chat_send_batch') AND a.mode = 't' AND a.name NOT IN ('outcome', 'i')
    """
    columns = "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = 'message'::regclass"
    async with engine.connect() as conn:
        rows = (await conn.execute(text(returned))).all()
        types = dict((await conn.execute(text(columns))).all())
    assert {name for name, _, _ in rows} == {"chat_send", "chat_send_batch"}
    for function, name, type_ in rows:
        assert name in MESSAGE_FIELDS, f"{function} returns {name}, no field of models.MessageRecord"
        assert type_ == types[name], f"{function} returns {name} as {type_}, the message table has {types[name]}"
