"""Where a token carries the user id: a claim path (CHATGQL_OIDC_USER_ID_CLAIM).

A path is a claim name ("sub"), a dotted path into nested objects ("app.chat_id"), or a
JSON array of names, for names that hold dots themselves: Hasura's namespaced claims are
'["https://hasura.io/jwt/claims", "x-hasura-user-id"]'.
"""

from __future__ import annotations

import json


def parse_claim_path(text: str) -> tuple[str, ...]:
    """The names of a claim path, outermost first; ValueError for one that names nothing."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            names = json.loads(stripped)
        except ValueError:
            raise ValueError(f"CHATGQL_OIDC_USER_ID_CLAIM is not a JSON array of names: {text!r}") from None
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise ValueError(f"CHATGQL_OIDC_USER_ID_CLAIM's JSON form is an array of strings: {text!r}")
        path = tuple(names)
    else:
        path = tuple(stripped.split("."))
    if not path or not all(path):
        raise ValueError(f"CHATGQL_OIDC_USER_ID_CLAIM names no claim: {text!r}")
    return path


def claim_at(claims: dict, path: tuple[str, ...]) -> object:
    """The value at path, or None when the token has nothing there."""
    value: object = claims
    for name in path:
        if not isinstance(value, dict) or name not in value:
            return None
        value = value[name]
    return value
