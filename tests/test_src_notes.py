"""src/ carries no lab notebook: no issue numbers, and no timings or before -> after figures in its
comments and docstrings. Measurements live in bench/results, a change's history in git
(docs/development/style.md); tests/test_docs.py keeps docs/ alike. No servers."""

from __future__ import annotations

import re

import pytest

from .conftest import REPO

SRC = REPO / "src" / "chatgql"
NOTEBOOK = {
    "an issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "a timing in microseconds": re.compile(r"\d(\.\d+)?\s?(us|µs|ns)\b"),
    "a before -> after figure": re.compile(r"\d(\.\d+)?\s?[a-zA-Zµ%]*\s?(->|→)\s?~?\d"),
    "a measurement's record": re.compile(r"\b(measured|timeit|py-spy|A/B)\b"),
}


@pytest.fixture(autouse=True)
def clean_database() -> None:
    """No database here: the suite's autouse truncation is not needed."""


def test_src_comments_hold_no_timings_or_issue_numbers() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for what, pattern in NOTEBOOK.items():
                if pattern.search(line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {what}: {line.strip()}")
    assert not found, "measurements belong in bench/results, history in git:\n" + "\n".join(found)
