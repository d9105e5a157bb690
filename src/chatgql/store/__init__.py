"""All of chatgql's SQL. Functions take a connection first and never commit."""

from __future__ import annotations

from collections.abc import Sequence


def key_literal(key: str) -> str:
    """An event's wire key (events/types.py: the camelCase of a field's name) as an SQL string literal,
    spliced into a statement instead of sent as a parameter: the statements that fill in an event's
    store fields are given their keys by the caller (the store names none), the same on every call,
    and a text[] parameter costs asyncpg CPU on every statement (its array encoder checks the array
    and each element against collections.abc's ABCs, each a Python-level isinstance: bench/results/micro.md).
    An identifier (checked): nothing to escape."""
    if not key.isidentifier():
        raise ValueError(f"an event key must be an identifier: {key!r}")
    return f"'{key}'"


def keys_literal(keys: Sequence[str]) -> str:
    """key_literal's text[]: the keys, in order, as an SQL array."""
    return f"ARRAY[{', '.join(map(key_literal, keys))}]::text[]" if keys else "'{}'::text[]"
