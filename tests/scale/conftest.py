"""The proof of the scaled topology starts everything of its own (tests/scale/topology.py):
no need for the shared test database (nor to empty it)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def clean_database() -> None:
    """Overrides tests/conftest.py's: the proof runs on a fresh database of its own PostgreSQL."""
