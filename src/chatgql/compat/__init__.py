"""Every use chatgql makes of a dependency's non-public API, in one package: a module per library
(graphql_core, strawberry, uvicorn with httptools, websockets, aiokafka). This module imports none
of them, so a caller takes only the library it reaches into (events/ takes aiokafka's, never
Strawberry's or graphql-core's).

Each access buys something exact or a gain bench/results records (the docstrings say what)
and would break, loudly or silently, on an upgrade of the library it reaches
into. So: every library named in PINNED is pinned exactly in pyproject.toml;
tests/test_compat.py exercises each access against the installed library and
fails with the access's name when it is gone or behaves otherwise, and fails
first of all when an installed version is not the one this package was written
for. docs/internals/compat.md says how to move a pin.

A chatgql class that subclasses a library class and relies on more than its
published interface takes its base class from here (the docstring lists what it
relies on), so that a reader of this package sees the whole surface.

Public API (what a library exports and documents) is used directly elsewhere,
not through this package.
"""

from __future__ import annotations

from importlib.metadata import version

# The versions this package was written for (distribution name -> version); pyproject.toml pins the same.
PINNED: dict[str, str] = {
    "graphql-core": "3.3.2",
    "strawberry-graphql": "0.341.2",
    "uvicorn": "0.54.0",
    "websockets": "17.4",
    "httptools": "0.9.0",
    "aiokafka": "0.14.0",
}

__all__ = ["PINNED", "version_mismatches"]


def version_mismatches() -> list[str]:
    """What is installed other than PINNED says, one line per library (empty: all as written for)."""
    found = []
    for name, wanted in PINNED.items():
        installed = version(name)
        if installed != wanted:
            found.append(f"{name} {installed} is installed; chatgql.compat was written for {wanted}")
    return found
