"""The habits of the codebase, enforced by the suite: ruff's lint and format check over
src/, tests/ and bench/, and mypy over src/ (configured in pyproject.toml). Each runs
as `python -m <tool>` from the repository's root; a failure shows the tool's output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _run(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=240, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"`{' '.join(args)}` exited {done.returncode}:\n{done.stdout}{done.stderr}", pytrace=False)


def test_ruff_check() -> None:
    _run("ruff", "check", "src", "tests", "bench")


def test_ruff_format() -> None:
    _run("ruff", "format", "--check", "src", "tests", "bench")


def test_mypy() -> None:
    _run("mypy", "src")
