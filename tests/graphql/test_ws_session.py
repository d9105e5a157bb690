"""A websocket's context: its viewer holds only as long as its connection_init token.

(The socket itself is closed with 4403 at exp by engine/handshake.py:
tests/adversarial/test_websocket_floods.py tries it against a running server;
here, the refusal of an operation that runs in the moment before the close.)
"""

from __future__ import annotations

import time

import pytest
from starlette.requests import Request
from starlette.websockets import WebSocket

from chatgql.edge.auth import issue_token, token_expiry
from chatgql.errors import Unauthenticated
from chatgql.graphql import context as context_module
from chatgql.graphql.context import Context, Deps
from chatgql.settings import load_settings


async def _never() -> dict:
    raise AssertionError("not read")


async def _nowhere(message: dict) -> None:
    raise AssertionError("not written")


def _websocket() -> WebSocket:
    return WebSocket({"type": "websocket", "path": "/graphql", "headers": [], "query_string": b""}, _never, _nowhere)


def _context(request, authorization: str | None = None) -> Context:
    settings = load_settings(env="development")
    params = {"Authorization": authorization} if authorization else None
    return Context(deps=Deps(settings=settings, database=None), request=request, connection_params=params)  # type: ignore[arg-type]


def test_a_websocket_viewer_is_unauthenticated_once_its_token_expired(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(env="development")
    token = issue_token(settings, "7", ttl_seconds=60)
    context = _context(_websocket(), f"Bearer {token}")
    assert context.viewer_id == "7"
    assert context.token_expires_at is not None and abs(context.token_expires_at - (time.time() + 60)) < 5
    later = context.token_expires_at + 0.001
    monkeypatch.setattr(context_module.time, "time", lambda: later)
    with pytest.raises(Unauthenticated, match="expired"):
        _ = context.viewer_id
    with pytest.raises(Unauthenticated, match="expired"):  # and stays so
        _ = context.viewer_id


def test_an_http_request_keeps_no_expiry_of_its_own() -> None:
    settings = load_settings(env="development")
    token = issue_token(settings, "7", ttl_seconds=60)
    scope = {"type": "http", "method": "POST", "path": "/graphql", "query_string": b""}
    scope["headers"] = [(b"authorization", f"Bearer {token}".encode())]
    context = _context(Request(scope))
    assert context.viewer_id == "7"
    assert context.token_expires_at is None  # a request is over in seconds: verified once is enough


def test_token_expiry_reads_exp_and_nothing_else() -> None:
    settings = load_settings(env="development")
    token = issue_token(settings, "7", ttl_seconds=120)
    expires = token_expiry(f"Bearer {token}")
    assert expires is not None and abs(expires - (time.time() + 120)) < 5
    assert token_expiry("Bearer not-a-token") is None
    assert token_expiry(None) is None
