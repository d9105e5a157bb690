"""chatgql with a real OpenID provider (Keycloak, tests/support/keycloak.py): its tokens over
HTTP and both websocket protocols, ES256 and EdDSA, namespaced claims, the tokens refused,
an unreachable or slow key endpoint, and a key rotation with no restart."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import uuid

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from chatgql.edge.auth import issue_token, user_from_authorization
from chatgql.edge.jwks import KeySet
from chatgql.settings import load_settings

from ..conftest import RunningServer
from ..support.keycloak import AUDIENCE, FOREIGN_REALM, HASURA_CLAIM, Keycloak
from ..support.live import MESSAGE_NEW, PROTOCOLS, WsClient, metrics, wait_active_subscriptions, wait_until
from .conftest import TcpProxy, oidc_settings

# The first test waits for Keycloak to start (once per session): minutes on a busy machine.
pytestmark = pytest.mark.timeout(900)

VIEWER = "query { viewer { userId } }"
CREATE_GROUP = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"
SEND = (
    "mutation($c: ID!, $m: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq senderId body } } }"
)


async def call(
    http: httpx.AsyncClient, server: RunningServer, token: str, query: str, variables: dict | None = None
) -> dict:
    response = await http.post(
        server.url, json={"query": query, "variables": variables or {}}, headers={"authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text  # a refused token is a GraphQL error, never a 500
    return response.json()


async def viewer(http: httpx.AsyncClient, server: RunningServer, token: str) -> str:
    body = await call(http, server, token, VIEWER)
    assert "errors" not in body, body
    return body["data"]["viewer"]["userId"]


async def refusal(http: httpx.AsyncClient, server: RunningServer, token: str) -> str:
    """The message of the UNAUTHENTICATED answer a token gets."""
    body = await call(http, server, token, VIEWER)
    assert body.get("data") is None, body
    [error] = body["errors"]
    assert error["extensions"]["code"] == "UNAUTHENTICATED", error
    return error["message"]


def header(token: str) -> dict:
    return jwt.get_unverified_header(token)


def claims(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(head: dict, body: dict, sign) -> str:
    """A JWT made by hand (PyJWT refuses to make the bad ones): sign(signing_input) -> signature."""
    signing_input = f"{_b64(json.dumps(head).encode())}.{_b64(json.dumps(body).encode())}"
    return f"{signing_input}.{_b64(sign(signing_input.encode()))}"


def good_claims(keycloak: Keycloak, **extra: object) -> dict:
    now = int(time.time())
    return {
        "iss": keycloak.issuer,
        "aud": AUDIENCE,
        "sub": "x",
        "chat_user_id": "1001",
        "iat": now,
        "exp": now + 300,
        **extra,
    }


# --- end to end ------------------------------------------------------------------------------


async def test_keycloak_tokens_work_for_query_and_mutation_over_http_and_subscription_over_both_websocket_protocols(
    oidc_server: RunningServer, keycloak: Keycloak, http: httpx.AsyncClient
) -> None:
    alice, bob = await keycloak.token("alice"), await keycloak.token("bob")
    assert header(alice)["alg"] == "RS256"
    assert await viewer(http, oidc_server, alice) == "1001"  # the chat id claim, not Keycloak's UUID sub
    assert await viewer(http, oidc_server, bob) == "1002"
    created = await call(http, oidc_server, alice, CREATE_GROUP, {"t": "keycloak", "m": ["1002"]})
    assert "errors" not in created, created
    group = created["data"]["createGroup"]["id"]
    for protocol in PROTOCOLS:  # websockets carry subscriptions only (queries and mutations go over HTTP)
        async with await WsClient.connect(oidc_server.ws_url, f"Bearer {bob}", protocol=protocol) as ws:
            live = await ws.subscribe(MESSAGE_NEW, {"c": group})
            await wait_active_subscriptions(oidc_server, 1)
            for token, body in ((bob, f"bob, {protocol}"), (alice, f"alice, {protocol}")):
                sent = await call(http, oidc_server, token, SEND, {"c": group, "m": str(uuid.uuid4()), "b": body})
                assert "errors" not in sent, sent
            events = await live.collect(2)
            assert [e["messageNew"]["message"]["senderId"] for e in events] == ["1002", "1001"]
            assert [e["messageNew"]["message"]["body"] for e in events] == [f"bob, {protocol}", f"alice, {protocol}"]
        await wait_active_subscriptions(oidc_server, 0)


async def test_a_websocket_with_a_refused_provider_token_is_not_acknowledged(
    oidc_server: RunningServer, keycloak: Keycloak
) -> None:
    from ..support.live import ConnectionRefused

    wrong_audience = await keycloak.token("alice", client_id="other-app")
    for protocol in PROTOCOLS:
        with pytest.raises(ConnectionRefused):
            await WsClient.connect(oidc_server.ws_url, f"Bearer {wrong_audience}", protocol=protocol)


async def test_es256_and_eddsa_tokens_of_the_provider_are_accepted(
    oidc_server: RunningServer, keycloak: Keycloak, http: httpx.AsyncClient
) -> None:
    for client_id, algorithm in (("chat-es256", "ES256"), ("chat-eddsa", "EdDSA")):
        token = await keycloak.token("bob", client_id=client_id)
        assert header(token)["alg"] == algorithm
        assert await viewer(http, oidc_server, token) == "1002"


async def test_hs256_tokens_of_chatgql_keep_working_beside_the_provider(
    oidc_server: RunningServer, http: httpx.AsyncClient
) -> None:
    assert await viewer(http, oidc_server, issue_token(oidc_server.settings, "77")) == "77"


async def test_the_user_id_is_read_at_a_namespaced_claim_path(oidc_server: RunningServer, keycloak: Keycloak) -> None:
    token = await keycloak.token("alice")
    assert claims(token)["https://hasura.io/jwt/claims"] == {"x-hasura-user-id": "1001"}
    keys = oidc_server.runtime.deps.keys
    hasura = load_settings(oidc_issuer=keycloak.issuer, oidc_audience=AUDIENCE, oidc_user_id_claim=HASURA_CLAIM)
    assert user_from_authorization(hasura, f"Bearer {token}", keys) == "1001"


# --- refused ---------------------------------------------------------------------------------


async def test_an_expired_token_is_refused(
    oidc_server: RunningServer, keycloak: Keycloak, http: httpx.AsyncClient
) -> None:
    token = await keycloak.token("alice", client_id="chat-short")  # lives 2 s
    assert await viewer(http, oidc_server, token) == "1001"
    # past exp and the server's leeway (1 s here)
    await asyncio.sleep(max(0.0, claims(token)["exp"] + oidc_server.settings.oidc_leeway_seconds + 0.5 - time.time()))
    assert await refusal(http, oidc_server, token) == "the token has expired"


async def test_a_token_for_another_audience_is_refused(
    oidc_server: RunningServer, keycloak: Keycloak, http: httpx.AsyncClient
) -> None:
    token = await keycloak.token("alice", client_id="other-app")
    assert "other-service" in claims(token)["aud"] and AUDIENCE not in claims(token)["aud"]
    assert await refusal(http, oidc_server, token) == "the token is for another audience"


async def test_a_token_of_a_foreign_issuer_is_refused_and_fetches_nothing(
    oidc_server: RunningServer, keycloak: Keycloak, http: httpx.AsyncClient
) -> None:
    keys = oidc_server.runtime.deps.keys
    token = await keycloak.token("alice", realm=FOREIGN_REALM)
    assert claims(token)["iss"] == keycloak.foreign_issuer and claims(token)["chat_user_id"] == "1001"
    fetches = keys.fetches
    assert await refusal(http, oidc_server, token) == "the token is from another issuer"
    assert keys.fetches == fetches


async def test_a_token_signed_by_an_unknown_key_is_refused(
    oidc_server: RunningServer, keycloak: Keycloak, http: httpx.AsyncClient
) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode(good_claims(keycloak), stranger, algorithm="RS256", headers={"kid": "made-up"})
    message = await refusal(http, oidc_server, token)
    assert message == "the token is signed by a key ('made-up') that the identity provider does not publish"
    # the provider's own kid on a stranger's signature is no better
    kid = header(await keycloak.token("alice"))["kid"]
    token = jwt.encode(good_claims(keycloak), stranger, algorithm="RS256", headers={"kid": kid})
    assert await refusal(http, oidc_server, token) == "the token is not valid"


async def test_alg_none_and_hs_rs_confusion_are_refused(
    oidc_server: RunningServer, keycloak: Keycloak, http: httpx.AsyncClient
) -> None:
    kid = header(await keycloak.token("alice"))["kid"]
    unsigned = forged({"alg": "none", "typ": "JWT", "kid": kid}, good_claims(keycloak), lambda _: b"")
    assert await refusal(http, oidc_server, unsigned) == "the token is not signed (alg none): refused"
    # HS256 with the provider's public key as the HMAC secret (the classic confusion)
    jwks = (await http.get(keycloak.jwks_url)).json()
    [rsa_jwk] = [k for k in jwks["keys"] if k["kid"] == kid]
    public_pem = jwt.PyJWK(rsa_jwk).key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    confused = forged(
        {"alg": "HS256", "typ": "JWT", "kid": kid},
        good_claims(keycloak, sub="1001"),
        lambda data: hmac.new(public_pem, data, hashlib.sha256).digest(),
    )
    assert await refusal(http, oidc_server, confused) == "the token is not valid"
    # an RSA key's kid under another algorithm's name
    es_token = await keycloak.token("alice", client_id="chat-es256")
    relabelled = es_token.split(".")
    relabelled[0] = _b64(json.dumps({**header(es_token), "alg": "RS256"}).encode())
    assert "does not publish" in await refusal(http, oidc_server, ".".join(relabelled))
    # an algorithm chatgql accepts from nobody
    rs512 = jwt.encode(good_claims(keycloak), rsa.generate_private_key(65537, 2048), algorithm="RS512")
    assert await refusal(http, oidc_server, rs512) == "the token's algorithm 'RS512' is not accepted here"


async def test_a_claim_path_that_is_not_in_the_token_is_refused_and_a_uuid_subject_is_the_user_id(
    oidc_server: RunningServer, keycloak: Keycloak, http: httpx.AsyncClient
) -> None:
    carol = await keycloak.token("carol")  # no chat id attribute: no chat_user_id claim
    assert "chat_user_id" not in claims(carol)
    assert await refusal(http, oidc_server, carol) == (
        "the token has no user id at chat_user_id (CHATGQL_OIDC_USER_ID_CLAIM)"
    )
    # Keycloak's sub is a UUID: a user id as it is (string user ids, issue 22)
    alice = await keycloak.token("alice")
    subject = claims(alice)["sub"]
    uuid.UUID(subject)
    by_sub = load_settings(oidc_issuer=keycloak.issuer, oidc_audience=AUDIENCE, oidc_user_id_claim="sub")
    assert user_from_authorization(by_sub, f"Bearer {alice}", oidc_server.runtime.deps.keys) == subject


# --- the key endpoint ------------------------------------------------------------------------


async def test_unknown_kids_share_one_fetch_and_refetches_are_rate_limited(keycloak: Keycloak) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def made_up(n: int) -> str:
        return "Bearer " + jwt.encode(good_claims(keycloak), stranger, algorithm="RS256", headers={"kid": f"k{n}"})

    async with KeySet(keycloak.issuer, min_refetch_seconds=0) as keys:
        assert keys.fetches == 1 and keys.keys  # at start, from the discovery document
        await asyncio.gather(*(keys.ensure(made_up(n)) for n in range(20)))
        assert keys.fetches == 2  # one fetch, shared by all twenty
    async with KeySet(keycloak.issuer, min_refetch_seconds=3600) as keys:
        for n in range(20):
            await keys.ensure(made_up(n))
        assert keys.fetches == 1  # within the period: no fetch at all
    async with KeySet(keycloak.issuer, refresh_seconds=0.05) as keys:
        await wait_until(lambda: keys.fetches >= 3, 30, "the periodic refresh")


async def test_an_unreachable_key_endpoint_refuses_unknown_kids_clearly_and_cached_keys_keep_working(
    oidc_database: str, keycloak: Keycloak, proxy: TcpProxy, http: httpx.AsyncClient
) -> None:
    proxied = f"http://127.0.0.1:{proxy.port}/realms/chat/protocol/openid-connect/certs"
    settings = oidc_settings(oidc_database, keycloak, oidc_jwks_url=proxied, run_relay=False)
    async with RunningServer(settings) as server:
        keys = server.runtime.deps.keys
        assert keys.keys and keys.last_error is None
        await proxy.down()
        stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        unknown = jwt.encode(good_claims(keycloak), stranger, algorithm="RS256", headers={"kid": "rotated-away"})
        failures = keys.failures
        assert await refusal(http, server, unknown) == (
            "the token is signed by a key ('rotated-away') this server does not know, and the identity "
            "provider's keys could not be fetched: try again later"
        )
        assert keys.failures == failures + 1
        # a new token of a key fetched before: verified with the cached key
        assert await viewer(http, server, await keycloak.token("bob")) == "1002"
        figures = await metrics(http, server)
        assert figures["chatgql_oidc_key_fetch_failures"] == keys.failures >= 1
        assert figures["chatgql_oidc_key_fetches"] == keys.fetches
        assert figures["chatgql_oidc_keys"] == len(keys.keys) >= 3  # RS256, ES256, EdDSA


async def test_a_slow_key_endpoint_does_not_block_other_requests(
    oidc_database: str, keycloak: Keycloak, proxy: TcpProxy, http: httpx.AsyncClient
) -> None:
    proxied = f"http://127.0.0.1:{proxy.port}/realms/chat/protocol/openid-connect/certs"
    settings = oidc_settings(oidc_database, keycloak, oidc_jwks_url=proxied, run_relay=False)
    async with RunningServer(settings) as server:
        keys = server.runtime.deps.keys
        proxy.hold = True
        stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        unknown = jwt.encode(good_claims(keycloak), stranger, algorithm="RS256", headers={"kid": "new-kid"})
        waiting = asyncio.create_task(refusal(http, server, unknown))
        await wait_until(lambda: proxy.held >= 1 or waiting.done(), 30, "the fetch to reach the key endpoint")
        # the fetch waits at the endpoint; the server answers everyone else meanwhile
        assert await viewer(http, server, await keycloak.token("alice")) == "1001"
        assert await viewer(http, server, issue_token(server.settings, "5")) == "5"
        assert not waiting.done()
        proxy.released.set()
        assert "does not publish" in await waiting
        assert keys.fetches == 2


# --- rotation (last: it changes the realm's keys) --------------------------------------------


async def test_the_provider_rotates_its_keys_with_no_restart(
    oidc_server: RunningServer, keycloak: Keycloak, http: httpx.AsyncClient
) -> None:
    keys = oidc_server.runtime.deps.keys
    old = await keycloak.token("alice")
    assert await viewer(http, oidc_server, old) == "1001"
    before = [p for p in await keycloak.key_providers() if p["providerId"] == "rsa-generated"]
    await keycloak.add_key_provider(await keycloak.realm_id(), "rsa-rotated", "rsa-generated", {"priority": ["500"]})
    new = await keycloak.token("alice")
    assert header(new)["kid"] != header(old)["kid"] and header(new)["kid"] not in keys.keys
    fetches = keys.fetches
    assert await viewer(http, oidc_server, new) == "1001"  # its kid was unknown: fetched, then verified
    assert keys.fetches == fetches + 1
    assert await viewer(http, oidc_server, old) == "1001"  # the old key is still published
    for provider in before:
        await keycloak.remove_component(provider["id"])
    assert header(old)["kid"] not in {k["kid"] for k in (await http.get(keycloak.jwks_url)).json()["keys"]}
    assert await viewer(http, oidc_server, old) == "1001"  # cached until the keys are fetched again...
    await keys.refetch(force=True)  # ...which the refresh task does every oidc_jwks_refresh_seconds
    assert await refusal(http, oidc_server, old) == (
        f"the token is signed by a key ({header(old)['kid']!r}) that the identity provider does not publish"
    )
    assert await viewer(http, oidc_server, new) == "1001"
