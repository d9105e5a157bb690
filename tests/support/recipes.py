"""The client recipes of docs/guide/clients.md are the code the tests run: this finds it.

A recipe is the lines of a test file between a `<comment> --- the recipe` line
and a `<comment> --- end of the recipe` line; tests/clients/test_urql.py and
tests/clients/test_gql_client.py check that docs/guide/clients.md holds theirs verbatim.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from ..conftest import REPO

CLIENTS_PAGE = REPO / "docs" / "guide" / "clients.md"


def recipe(path: Path, comment: str) -> str:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{comment} --- the recipe"))
    end = lines.index(f"{comment} --- end of the recipe")
    return "\n".join(lines[start + 1 : end]).strip("\n")


async def run_node_report(node: str, cwd: Path, script: str, *args: str, timeout: float) -> dict:
    """Run a Node.js client script; its last stdout line is a JSON report with "ok": true (checked)."""
    process = await asyncio.create_subprocess_exec(
        node, script, *args, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    lines = stdout.decode().strip().splitlines()
    assert lines, stderr.decode()
    report = json.loads(lines[-1])
    assert report["ok"], (report, stderr.decode())
    assert process.returncode == 0
    return report
