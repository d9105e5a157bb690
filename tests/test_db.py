"""db.upgrade's shortcut: a database at head is left alone without starting Alembic."""

from __future__ import annotations

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text

from chatgql import db


def test_the_head_read_from_the_migration_files_is_alembics_head():
    config = Config()
    config.set_main_option("script_location", str(db.ALEMBIC_DIR))
    assert db._script_head() == ScriptDirectory.from_config(config).get_current_head()


async def test_only_a_database_at_head_skips_alembic(engine, migrated_url):
    head = db._script_head()
    assert await db._at_head(migrated_url)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = '0002'"))
    try:
        assert not await db._at_head(migrated_url)
    finally:
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})
