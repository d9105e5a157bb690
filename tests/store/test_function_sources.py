"""Each stored function of the migrated database is its source file's text: alembic/functions/NAME.sql
holds today's function whole (the migrations install it from there), and no function of chatgql's
lacks one. Frozen earlier texts (NAME@REVISION.sql) name a migration that exists."""

from __future__ import annotations

import re

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from chatgql.db import ALEMBIC_DIR, FUNCTIONS_DIR

# Functions of the extensions chatgql installs (btree_gin's), not chatgql's own.
_OWN = text(
    """
    SELECT p.proname, pg_get_functiondef(p.oid) AS definition
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'public'
       AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
    """
)


def _statement(source: str) -> str:
    """A source file's CREATE statement: its comment lines and the closing semicolon left out."""
    lines = [line for line in source.splitlines() if not line.startswith("--")]
    return "\n".join(lines).strip().removesuffix(";").strip()


async def test_every_stored_function_is_its_source_file(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        functions = {row.proname: row.definition for row in await conn.execute(_OWN)}
    sources = {path.stem: path.read_text() for path in FUNCTIONS_DIR.glob("*.sql") if "@" not in path.stem}
    assert sorted(functions) == sorted(sources), "a stored function without a source file, or the other way"
    for name, definition in functions.items():
        assert _statement(sources[name]) == definition.strip(), f"{name}: the database's text is not its file's"


def test_each_source_names_a_migration_that_installs_it() -> None:
    migrations = {path.stem: path.read_text() for path in (ALEMBIC_DIR / "versions").glob("*.py")}
    for path in FUNCTIONS_DIR.glob("*.sql"):
        first = path.read_text().splitlines()[0]
        match = re.fullmatch(r"-- revision: (\S+)", first)
        assert match, f"{path.name}: its first line names the migration that installs it"
        revision = match[1]
        name = path.stem.split("@")[0]
        if "@" in path.stem:
            assert path.stem.split("@")[1] == revision, f"{path.name}: a frozen text's name is its revision's"
        assert revision in migrations, f"{path.name}: no migration {revision}"
        assert f'"{name}"' in migrations[revision], f"{path.name}: migration {revision} does not install {name}"
