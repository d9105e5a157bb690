"""Bearer tokens must expire: exp is required, and a token may not live longer than the server allows.
A token minted for an audience (aud) works only on a server that expects that audience."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import jwt
import pytest

from chatgql.edge.auth import issue_token, user_from_authorization
from chatgql.errors import Unauthenticated
from chatgql.settings import load_settings

from ..conftest import REPO
from .conftest import SECRET, ServeProcess, serve_process

DAY = 24 * 3600
QUERY = "{ viewer { userId } }"


def _token(claims: dict, secret: str = SECRET) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


async def _ask(server: ServeProcess, token: str) -> dict:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(server.url, json={"query": QUERY}, headers={"authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text[:300]
    return response.json()


def _refused(body: dict) -> str:
    assert body.get("data") is None and body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED", body
    return body["errors"][0]["message"]


async def test_production_refuses_a_token_without_exp(prod: ServeProcess):
    now = int(time.time())
    assert "exp" in _refused(await _ask(prod, _token({"sub": "7"}))).lower()
    assert "exp" in _refused(await _ask(prod, _token({"sub": "7", "iat": now}))).lower()


async def test_production_refuses_a_token_that_lives_longer_than_the_maximum(prod: ServeProcess):
    now = int(time.time())
    longest = prod.settings.jwt_max_lifetime_seconds
    _refused(await _ask(prod, _token({"sub": "7", "iat": now, "exp": now + longest + 60})))
    _refused(await _ask(prod, _token({"sub": "7", "exp": now + longest + 60})))  # no iat: from now
    _refused(await _ask(prod, _token({"sub": "7", "iat": now - DAY, "exp": now + longest})))  # issued long before


async def test_normal_tokens_work(prod: ServeProcess):
    now = int(time.time())
    longest = prod.settings.jwt_max_lifetime_seconds
    for token in (
        prod.token(7),
        issue_token(prod.settings, "7"),  # the longest issue_token makes
        _token({"sub": "7", "iat": now, "exp": now + longest}),
        _token({"sub": "7", "exp": now + 600}),
    ):
        body = await _ask(prod, token)
        assert body == {"data": {"viewer": {"userId": "7"}}}, body


async def test_a_server_with_a_shorter_maximum_refuses_what_another_accepts(migrated_url, prod: ServeProcess):
    token = prod.token(7)  # one hour
    assert "errors" not in await _ask(prod, token)
    async with serve_process(migrated_url, CHATGQL_JWT_MAX_LIFETIME_SECONDS="600") as strict:
        assert "longer" in _refused(await _ask(strict, token))
        assert "errors" not in await _ask(strict, issue_token(strict.settings, "7"))


async def test_a_token_with_an_aud_claim_is_refused_by_a_server_that_expects_no_audience(prod: ServeProcess):
    """CHATGQL_JWT_AUDIENCE unset: a token for another service that shares the secret does not work here."""
    assert prod.settings.jwt_audience is None
    now = int(time.time())
    claims = {"sub": "7", "iat": now, "exp": now + 600}
    for aud in ("other-service", ["other-service"], ["other-service", "chat"], "", []):
        assert "audience" in _refused(await _ask(prod, _token({**claims, "aud": aud}))), aud
    assert await _ask(prod, _token(claims)) == {"data": {"viewer": {"userId": "7"}}}


async def test_with_an_audience_set_only_a_token_for_it_is_accepted(migrated_url):
    async with serve_process(migrated_url, CHATGQL_JWT_AUDIENCE="chat") as server:
        now = int(time.time())
        claims = {"sub": "7", "iat": now, "exp": now + 600}
        for aud in ("chat", ["chat"], ["other-service", "chat"]):
            assert await _ask(server, _token({**claims, "aud": aud})) == {"data": {"viewer": {"userId": "7"}}}, aud
        assert await _ask(server, server.token(7)) == {"data": {"viewer": {"userId": "7"}}}  # issue_token adds it
        for aud in ("other-service", ["other-service"], "Chat"):
            assert "audience" in _refused(await _ask(server, _token({**claims, "aud": aud}))), aud
        assert "aud" in _refused(await _ask(server, _token(claims)))  # no aud: not minted for this server


def test_the_verified_token_cache_does_not_carry_a_token_past_a_shorter_maximum():
    lenient = load_settings(env="production", jwt_secret=SECRET)
    strict = load_settings(env="production", jwt_secret=SECRET, jwt_max_lifetime_seconds=600)
    header = f"Bearer {issue_token(lenient, '9', ttl_seconds=3600)}"
    assert user_from_authorization(lenient, header) == "9"
    with pytest.raises(Unauthenticated):
        user_from_authorization(strict, header)


def test_development_refuses_a_token_without_exp_too():
    settings = load_settings(env="development")
    token = _token({"sub": "7"}, settings.jwt_secret.get_secret_value())
    with pytest.raises(Unauthenticated, match="exp"):
        user_from_authorization(settings, f"Bearer {token}")


def test_issue_token_refuses_a_lifetime_the_server_would_refuse():
    settings = load_settings(jwt_max_lifetime_seconds=3600)
    with pytest.raises(ValueError):
        issue_token(settings, "7", ttl_seconds=3601)
    with pytest.raises(ValueError):
        issue_token(settings, "7", ttl_seconds=0)
    claims = jwt.decode(issue_token(settings, "7"), options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 3600


def _cli_token(*args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    child = {k: v for k, v in os.environ.items() if not k.startswith("CHATGQL_")}
    child.update(env)
    return subprocess.run(
        [sys.executable, "-m", "chatgql.server.cli", "token", *args],
        cwd=REPO,
        env=child,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_token_refuses_a_ttl_above_the_maximum_and_defaults_to_it():
    refused = _cli_token("7", "--ttl", str(3601), CHATGQL_JWT_MAX_LIFETIME_SECONDS="3600")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "CHATGQL_JWT_MAX_LIFETIME_SECONDS" in refused.stderr
    made = _cli_token("7", CHATGQL_JWT_MAX_LIFETIME_SECONDS="3600")
    assert made.returncode == 0, made.stderr
    claims = jwt.decode(made.stdout.strip(), options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 3600
