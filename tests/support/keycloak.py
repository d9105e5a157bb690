"""A real Keycloak for the identity tests: started by scripts/keycloak.sh (once for tests/identity),
then set up through its admin REST API.

Realm "chat" (the issuer chatgql trusts):
- clients, all public with the password grant, whose access tokens carry aud "chatgql" and
  the user's chat id in two claims: `chat_user_id` and Hasura's namespaced
  `https://hasura.io/jwt/claims` -> `x-hasura-user-id`:
  chat-web (RS256), chat-es256 (ES256), chat-eddsa (EdDSA), chat-short (tokens live 2 s);
- other-app: aud "other-service" instead (a token for another application);
- users alice (chat id 1001), bob (1002), and carol, who has none.

Realm "elsewhere": a foreign issuer with a user alice of its own.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "keycloak.sh"
REALM = "chat"
FOREIGN_REALM = "elsewhere"
AUDIENCE = "chatgql"
PASSWORD = "correct-horse-battery"
USERS = {"alice": 1001, "bob": 1002, "carol": None}
HASURA_CLAIM = '["https://hasura.io/jwt/claims", "x-hasura-user-id"]'
KEY_PROVIDER = "org.keycloak.keys.KeyProvider"


def start(port: int, run_dir: Path) -> str:
    """Start Keycloak on 127.0.0.1:port (scripts/keycloak.sh); its base URL."""
    done = subprocess.run(
        [str(SCRIPT), "start", "--port", str(port), "--dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/keycloak.sh start failed:\n{done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


def stop(port: int, run_dir: Path) -> None:
    subprocess.run([str(SCRIPT), "stop", "--port", str(port), "--dir", str(run_dir)], timeout=120, check=False)


def _mapper(name: str, mapper: str, config: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "protocol": "openid-connect", "protocolMapper": mapper, "config": config}


def _mappers(audience: str) -> list[dict[str, Any]]:
    claim = {"access.token.claim": "true", "id.token.claim": "false", "userinfo.token.claim": "false"}
    return [
        _mapper("audience", "oidc-audience-mapper", {"included.custom.audience": audience, **claim}),
        _mapper(
            "chat-user-id",
            "oidc-usermodel-attribute-mapper",
            {"user.attribute": "chat_user_id", "claim.name": "chat_user_id", "jsonType.label": "String", **claim},
        ),
        _mapper(
            "hasura-user-id",
            "oidc-usermodel-attribute-mapper",
            {
                "user.attribute": "chat_user_id",
                # Keycloak nests at the dots; the escaped ones stay in the name
                "claim.name": r"https://hasura\.io/jwt/claims.x-hasura-user-id",
                "jsonType.label": "String",
                **claim,
            },
        ),
    ]


def _client(client_id: str, audience: str = AUDIENCE, **attributes: str) -> dict[str, Any]:
    return {
        "clientId": client_id,
        "publicClient": True,
        "directAccessGrantsEnabled": True,
        "standardFlowEnabled": False,
        "attributes": attributes,
        "protocolMappers": _mappers(audience),
    }


@dataclass
class Keycloak:
    """The running Keycloak and what the tests ask of it."""

    base_url: str
    http: httpx.AsyncClient

    @property
    def issuer(self) -> str:
        return f"{self.base_url}/realms/{REALM}"

    @property
    def foreign_issuer(self) -> str:
        return f"{self.base_url}/realms/{FOREIGN_REALM}"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    async def _admin_headers(self) -> dict[str, str]:
        # a fresh admin token each time: the master realm's live only a minute
        response = await self.http.post(
            f"{self.base_url}/realms/master/protocol/openid-connect/token",
            data={"grant_type": "password", "client_id": "admin-cli", "username": "admin", "password": "admin"},
        )
        response.raise_for_status()
        return {"authorization": f"Bearer {response.json()['access_token']}"}

    async def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = await self.http.request(
            method, f"{self.base_url}/admin/realms{path}", headers=await self._admin_headers(), **kwargs
        )
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text[:1000]}")
        return response

    async def token(self, username: str, client_id: str = "chat-web", realm: str = REALM) -> str:
        """An access token from the realm's token endpoint (the password grant)."""
        response = await self.http.post(
            f"{self.base_url}/realms/{realm}/protocol/openid-connect/token",
            data={"grant_type": "password", "client_id": client_id, "username": username, "password": PASSWORD},
        )
        assert response.status_code == 200, response.text
        return response.json()["access_token"]

    async def setup(self) -> None:
        """Both realms, their clients, key providers and users."""
        for realm in (REALM, FOREIGN_REALM):
            existing = await self.http.get(f"{self.base_url}/admin/realms/{realm}", headers=await self._admin_headers())
            if existing.status_code == 200:  # a Keycloak that ran the tests before (CHATGQL_TEST_KEYCLOAK_URL)
                await self.admin("DELETE", f"/{realm}")
            await self.admin("POST", "", json={"realm": realm, "enabled": True, "accessTokenLifespan": 600})
            # Keycloak 24+ keeps only the attributes its user profile declares: let chat_user_id in.
            profile = (await self.admin("GET", f"/{realm}/users/profile")).json()
            profile["unmanagedAttributePolicy"] = "ENABLED"
            await self.admin("PUT", f"/{realm}/users/profile", json=profile)
        clients = [
            _client("chat-web"),
            _client("chat-es256", **{"access.token.signed.response.alg": "ES256"}),
            _client("chat-eddsa", **{"access.token.signed.response.alg": "EdDSA"}),
            _client("chat-short", **{"access.token.lifespan": "2"}),
            _client("other-app", audience="other-service"),
        ]
        for client in clients:
            await self.admin("POST", f"/{REALM}/clients", json=client)
        await self.admin("POST", f"/{FOREIGN_REALM}/clients", json=_client("chat-web"))
        realm_id = (await self.admin("GET", f"/{REALM}")).json()["id"]
        for name, provider, config in (
            ("ec-p256", "ecdsa-generated", {"ecdsaEllipticCurveKey": ["P-256"]}),
            ("ed25519", "eddsa-generated", {"eddsaEllipticCurveKey": ["Ed25519"]}),
        ):
            await self.add_key_provider(realm_id, name, provider, {"priority": ["100"], **config})
        for realm in (REALM, FOREIGN_REALM):
            for username, chat_id in USERS.items():
                user: dict[str, Any] = {
                    "username": username,
                    "enabled": True,
                    "email": f"{username}@example.com",
                    "emailVerified": True,
                    "firstName": username.title(),
                    "lastName": "Tester",
                    "credentials": [{"type": "password", "value": PASSWORD, "temporary": False}],
                }
                if chat_id is not None:
                    user["attributes"] = {"chat_user_id": [str(chat_id)]}
                await self.admin("POST", f"/{realm}/users", json=user)

    async def realm_id(self) -> str:
        return (await self.admin("GET", f"/{REALM}")).json()["id"]

    async def add_key_provider(self, realm_id: str, name: str, provider: str, config: dict[str, list[str]]) -> None:
        await self.admin(
            "POST",
            f"/{REALM}/components",
            json={
                "name": name,
                "providerId": provider,
                "providerType": KEY_PROVIDER,
                "parentId": realm_id,
                "config": config,
            },
        )

    async def key_providers(self) -> list[dict[str, Any]]:
        response = await self.admin("GET", f"/{REALM}/components", params={"type": KEY_PROVIDER})
        return response.json()

    async def remove_component(self, component_id: str) -> None:
        await self.admin("DELETE", f"/{REALM}/components/{component_id}")
