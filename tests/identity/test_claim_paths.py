"""CHATGQL_OIDC_USER_ID_CLAIM's forms, and the OIDC settings a server refuses to start with.
No servers (the Keycloak tests are test_keycloak.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from chatgql.claims import claim_at, parse_claim_path
from chatgql.settings import load_settings


@pytest.fixture(autouse=True)
def clean_database() -> None:
    """No database here: the suite's autouse truncation is not needed."""


def test_a_claim_path_is_a_name_a_dotted_path_or_a_json_array_of_names():
    assert parse_claim_path("sub") == ("sub",)
    assert parse_claim_path("app_metadata.chat_id") == ("app_metadata", "chat_id")
    hasura = parse_claim_path('["https://hasura.io/jwt/claims", "x-hasura-user-id"]')
    assert hasura == ("https://hasura.io/jwt/claims", "x-hasura-user-id")
    token = {"sub": "u", "https://hasura.io/jwt/claims": {"x-hasura-user-id": "42"}, "app_metadata": {"chat_id": 7}}
    assert claim_at(token, hasura) == "42"
    assert claim_at(token, ("app_metadata", "chat_id")) == 7
    assert claim_at(token, ("app_metadata", "missing")) is None
    assert claim_at(token, ("sub", "deeper")) is None  # a string has no claims inside


@pytest.mark.parametrize("path", ["", "a..b", ".sub", "[]", '["a", 1]', "[not json"])
def test_a_claim_path_that_names_nothing_is_refused_at_start(path: str):
    with pytest.raises(ValidationError, match="CHATGQL_OIDC_USER_ID_CLAIM"):
        load_settings(oidc_issuer="https://id.example.com/", oidc_audience="chat", oidc_user_id_claim=path)


def test_an_issuer_needs_an_audience_and_a_jwks_url_needs_an_issuer():
    with pytest.raises(ValidationError, match="CHATGQL_OIDC_AUDIENCE"):
        load_settings(oidc_issuer="https://id.example.com/")
    with pytest.raises(ValidationError, match="CHATGQL_OIDC_ISSUER"):
        load_settings(oidc_jwks_url="https://id.example.com/jwks.json", oidc_audience="chat")
    settings = load_settings(oidc_issuer="https://id.example.com/", oidc_audience="chat")
    assert settings.oidc_user_id_claim == "sub"
