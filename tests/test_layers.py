"""The layers of docs/development/style.md, checked by import-linter: server -> graphql -> engine -> edge -> services -> store -> models
-> db -> runtime and compat, events beside services, nothing imports app.py, nothing below graphql/ imports
GraphQL's libraries (not even through compat/), the engine and the API apart (the API knows the engine only
through engine/registry.py), no cycles between siblings. The contracts are
pyproject.toml's [tool.importlinter]; `lint-imports` runs them as CI does, and shows what broke."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(src: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the chatgql package found under `src`, with the repository's contracts."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=src,
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def lint_with_import(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    """lint_imports on a copy of the package whose `module` (a path under chatgql/) ends with `line`."""
    shutil.copytree(REPO / "src" / "chatgql", tmp_path / "chatgql", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "chatgql" / module, "a") as source:
        source.write(f"\n{line}  # noqa: E402, F401\n")
    return lint_imports(tmp_path)


def test_every_layer_contract_is_kept() -> None:
    result = lint_imports(REPO / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout


def test_a_store_module_importing_events_breaks_the_layers(tmp_path: Path) -> None:
    """The check is live: a copy of the package whose store/ imports events/ fails it, by name."""
    result = lint_with_import(tmp_path, "store/health.py", "from ..events import types")
    assert result.returncode != 0, result.stdout
    assert "chatgql.store is not allowed to import chatgql.events" in result.stdout, result.stdout
    assert "chatgql.store.health -> chatgql.events.types" in result.stdout, result.stdout


def test_events_reaching_graphql_through_compat_breaks_the_contract(tmp_path: Path) -> None:
    """No indirect-import allowance: an events/ module that takes Strawberry's compat module (which
    imports strawberry and graphql-core) breaks "nothing below graphql/ imports GraphQL's libraries"."""
    result = lint_with_import(tmp_path, "events/publish.py", "from ..compat import strawberry")
    assert result.returncode != 0, result.stdout
    assert "chatgql.events is not allowed to import strawberry" in result.stdout, result.stdout
    assert "chatgql.events.publish -> chatgql.compat.strawberry" in result.stdout, result.stdout


def test_contracts_allow_no_indirect_imports() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert "allow_indirect_imports" not in text


def test_the_engine_importing_a_resolver_breaks_the_contract(tmp_path: Path) -> None:
    """The engine knows the API only through what it is given: a copy whose engine/ imports
    graphql/queries.py fails, by name."""
    result = lint_with_import(tmp_path, "engine/meter.py", "from ..graphql import queries")
    assert result.returncode != 0, result.stdout
    assert "chatgql.engine is not allowed to import chatgql.graphql" in result.stdout, result.stdout


def test_a_resolver_reaching_into_the_engine_breaks_the_contract(tmp_path: Path) -> None:
    """The API knows the engine only through engine/registry.py: a copy whose subscriptions.py imports
    the parking machinery itself fails, by name."""
    result = lint_with_import(tmp_path, "graphql/subscriptions.py", "from ..engine.parked import Parked")
    assert result.returncode != 0, result.stdout
    assert "chatgql.graphql is not allowed to import chatgql.engine.parked" in result.stdout, result.stdout
    assert "chatgql.graphql.subscriptions -> chatgql.engine.parked" in result.stdout, result.stdout


def test_the_api_contract_forbids_every_engine_module_but_the_registry() -> None:
    """A new engine module is forbidden to the API as soon as it exists (it must be listed)."""
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("source_modules") == ["chatgql.graphql"]]
    engine = REPO / "src" / "chatgql" / "engine"
    modules = {
        f"chatgql.engine.{path.stem}"
        for path in engine.iterdir()
        if (path.suffix == ".py" or (path / "__init__.py").exists()) and path.stem not in ("__init__", "registry")
    }
    assert set(contract["forbidden_modules"]) == modules
