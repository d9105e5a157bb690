"""The client recipes of README.md ("Client recipes") are the code the tests run: this finds it.

A recipe is the lines of a test file between a `<comment> --- the recipe` line
and a `<comment> --- end of the recipe` line; tests/test_urql.py and
tests/test_gql_client.py check that README.md holds theirs verbatim.
"""

from __future__ import annotations

from pathlib import Path

from .conftest import REPO

README = REPO / "README.md"


def recipe(path: Path, comment: str) -> str:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{comment} --- the recipe"))
    end = lines.index(f"{comment} --- end of the recipe")
    return "\n".join(lines[start + 1 : end]).strip("\n")
