"""An OpenID Connect provider's signing keys (its JWKS), cached for auth.py.

The keys come from CHATGQL_OIDC_JWKS_URL or, unset, from the jwks_uri of the issuer's
discovery document (<issuer>/.well-known/openid-configuration). They are fetched

- when the server starts (a provider that is down then is not fatal: tokens of HS256 still
  work, and the keys are fetched again on the first token that needs them);
- every oidc_jwks_refresh_seconds by the lifespan's task: a key the provider removed stops
  verifying then;
- at once for a token signed by a key not known yet (the provider rotated: its new key is
  published before it signs with it), at most once per oidc_jwks_min_refetch_seconds, and
  one fetch at a time: requests that wait for keys share it.

Every fetch is awaited on the event loop (httpx's AsyncClient), never a blocking call: the
token check itself stays synchronous (graphql/context.py's viewer_id) because the fetch it
may need is done before, by `ensure`, when the request's context is built (HTTP) or the
websocket's connection_init arrives. A fetch that fails keeps the keys already known: their
tokens go on working, and a token signed by another key is UNAUTHENTICATED, saying why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from ..errors import Unauthenticated

log = logging.getLogger(__name__)

# The signatures accepted from a provider: RSA, ECDSA on P-256, and Ed25519.
ASYMMETRIC = ("RS256", "ES256", "EdDSA")
# A key's algorithm when its JWK does not say (kty, crv).
_IMPLIED: dict[tuple[object, object], str] = {
    ("RSA", None): "RS256",
    ("EC", "P-256"): "ES256",
    ("OKP", "Ed25519"): "EdDSA",
}


@dataclass(frozen=True)
class Key:
    kid: str | None
    algorithm: str
    key: Any  # cryptography's public key


def parse_jwks(document: object) -> dict[str | None, Key]:
    """The signing keys of a JWKS document by kid; a key chatgql cannot use is left out."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWKS document (an object with a 'keys' array)")
    keys: dict[str | None, Key] = {}
    for entry in document["keys"]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue  # encryption keys (Keycloak publishes an RSA-OAEP one) never sign tokens
        algorithm = entry.get("alg") or _IMPLIED.get((entry.get("kty"), entry.get("crv")))
        if algorithm not in ASYMMETRIC:
            continue
        try:
            key = jwt.PyJWK(entry, algorithm=algorithm).key
        except (jwt.PyJWTError, ValueError, TypeError) as error:
            log.warning("skipping the provider's key %r: %s", entry.get("kid"), error)
            continue
        kid = entry.get("kid")
        keys[kid if isinstance(kid, str) else None] = Key(kid if isinstance(kid, str) else None, algorithm, key)
    return keys


class KeySet:
    """The provider's keys, as last fetched; opened and closed by app.py's lifespan."""

    def __init__(
        self,
        issuer: str,
        jwks_url: str | None = None,
        *,
        refresh_seconds: float = 300.0,
        min_refetch_seconds: float = 10.0,
        timeout_seconds: float = 5.0,
    ) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url  # None: from the discovery document, once it was read
        self.refresh_seconds = refresh_seconds
        self.min_refetch_seconds = min_refetch_seconds
        self.timeout_seconds = timeout_seconds
        self.keys: dict[str | None, Key] = {}
        self.fetches = 0  # attempts, successful or not
        self.failures = 0
        self.last_error: str | None = None  # why the last fetch failed; None once one succeeded
        self._last_attempt = float("-inf")  # time.monotonic()
        self._client: httpx.AsyncClient | None = None
        self._inflight: asyncio.Future[None] | None = None
        self._refresher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> KeySet:
        self._client = httpx.AsyncClient(timeout=self.timeout_seconds, follow_redirects=False, trust_env=False)
        await self.refetch(force=True)
        self._refresher = asyncio.create_task(self._refresh_forever(), name="chatgql-jwks-refresh")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            try:
                await self._refresher
            except asyncio.CancelledError:
                pass
        if self._client is not None:
            await self._client.aclose()

    async def _refresh_forever(self) -> None:
        while True:
            # After a failure, sooner: keys that rotated meanwhile are picked up once it is back.
            wait = self.refresh_seconds if self.last_error is None else min(self.refresh_seconds, 5.0)
            await asyncio.sleep(wait)
            await self.refetch(force=True)

    async def ensure(self, authorization: object) -> None:
        """Before a token is checked: fetch the keys if it is signed by one not known (yet).

        Cheap for every other value (HS256 tokens, garbage, a known key): the check itself says
        what is wrong with them."""
        if not isinstance(authorization, str):
            return
        token = authorization.strip().partition(" ")[2].strip()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return
        if header.get("alg") not in ASYMMETRIC or self.find(header.get("kid"), header["alg"]) is not None:
            return
        try:
            issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
        except jwt.PyJWTError:
            return
        if issuer == self.issuer:  # another issuer's tokens never make this server fetch anything
            await self.refetch()

    def find(self, kid: object, algorithm: str) -> Key | None:
        """The known key a token's header names (by kid; without one, the only key of its algorithm)."""
        if isinstance(kid, str):
            key = self.keys.get(kid)
        elif kid is None:
            candidates = [k for k in self.keys.values() if k.algorithm == algorithm]
            key = candidates[0] if len(candidates) == 1 else None
        else:
            key = None
        return key if key is not None and key.algorithm == algorithm else None

    def unknown_key(self, kid: object) -> Unauthenticated:
        """The answer for a token whose key is not known."""
        named = f" ({str(kid)[:64]!r})" if kid is not None else ""
        if self.last_error is not None:
            return Unauthenticated(
                f"the token is signed by a key{named} this server does not know, and the identity "
                "provider's keys could not be fetched: try again later"
            )
        return Unauthenticated(f"the token is signed by a key{named} that the identity provider does not publish")

    async def refetch(self, *, force: bool = False) -> None:
        """Fetch the keys again (forced, or at most once per min_refetch_seconds); one fetch at a time."""
        if self._inflight is not None:
            await asyncio.shield(self._inflight)
            return
        now = time.monotonic()
        if not force and now - self._last_attempt < self.min_refetch_seconds:
            return
        self._last_attempt = now
        future = self._inflight = asyncio.get_running_loop().create_future()
        try:
            await self._fetch()
        finally:
            self._inflight = None
            future.set_result(None)

    async def _fetch(self) -> None:
        assert self._client is not None, "KeySet used outside its async with"
        self.fetches += 1
        try:
            if self.jwks_url is None:
                self.jwks_url = await self._discover()
            response = await self._client.get(self.jwks_url, headers={"accept": "application/json"})
            response.raise_for_status()
            keys = parse_jwks(response.json())
        except (httpx.HTTPError, ValueError) as error:
            self.failures += 1
            self.last_error = f"{type(error).__name__}: {error}"
            log.warning("could not fetch the identity provider's keys (kept %d known): %s", len(self.keys), error)
            return
        added = keys.keys() - self.keys.keys()
        removed = self.keys.keys() - keys.keys()
        if added or removed:
            log.info(
                "identity provider's keys: %d (added %s, removed %s)",
                len(keys),
                sorted(map(str, added)),
                sorted(map(str, removed)),
            )
        self.keys = keys
        self.last_error = None

    async def _discover(self) -> str:
        """The jwks_uri of the issuer's discovery document, whose issuer must be ours."""
        assert self._client is not None
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        response = await self._client.get(url, headers={"accept": "application/json"})
        response.raise_for_status()
        document = response.json()
        if not isinstance(document, dict) or not isinstance(document.get("jwks_uri"), str):
            raise ValueError(f"{url} has no jwks_uri")
        if document.get("issuer") != self.issuer:
            raise ValueError(
                f"{url} is the discovery document of {document.get('issuer')!r}, not of CHATGQL_OIDC_ISSUER"
            )
        return document["jwks_uri"]
