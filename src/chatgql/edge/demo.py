"""The reference web chat at /demo and the development sign-in at /dev/token.

The web chat's sources are in webchat/ (React, @urql/core, graphql-ws); its built files
are package data in src/chatgql/static/demo/, listed in manifest.json, so a user needs
no build step. GET /demo -> the page; GET /demo/assets/<name> -> a built file.
Mounted when settings.demo_enabled (development by default).

POST /dev/token {"userId": "7"} -> {"token": ..., "userId": "7"}: a token for any user,
for the web chat's and GraphiQL's sign-in. Mounted only in development (production
answers 404, as for any unknown path), whatever CHATGQL_DEMO says.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..errors import BadUserInput
from ..services.checks import check_user_id
from ..settings import Settings
from .auth import issue_token

DEMO_PATH = "/demo"
DEV_TOKEN_PATH = "/dev/token"
DEV_TOKEN_TTL_SECONDS = 24 * 3600
_MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def webchat_documents() -> Path:
    """The web chat's persisted documents (Apollo's manifest format, written by webchat/build.mjs):
    what `chatgql documents load --webchat` loads for an allowlist server."""
    return Path(str(resources.files("chatgql") / "static" / "demo" / "documents.json"))


def webchat_document_texts() -> dict[str, str]:
    """id -> text of the web chat's documents: a server that serves the web chat runs them by id
    without a load, in allowlist mode too."""
    manifest = json.loads(webchat_documents().read_text(encoding="utf-8"))
    return {operation["id"]: operation["body"] for operation in manifest["operations"]}


class DemoFiles:
    """The page and the built files it may reference, read once at startup."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or Path(str(resources.files("chatgql") / "static" / "demo"))
        self.template = (self.directory / "index.html").read_text(encoding="utf-8")
        manifest = json.loads((self.directory / "manifest.json").read_text(encoding="utf-8"))
        self.assets = {name: self.directory / name for name in manifest["files"]}

    def page(self, settings: Settings, request: Request) -> Response:
        root = request.scope.get("root_path", "").rstrip("/")
        config = {
            "graphqlPath": f"{root}/graphql",
            "devTokenPath": f"{root}{DEV_TOKEN_PATH}" if settings.dev_sign_in_enabled else None,
            # The composer warns before a send the server would refuse.
            "maxBodyChars": settings.max_body_chars,
            "maxTitleChars": settings.max_title_chars,
        }
        page = self.template.replace("{assets}", f"{root}{DEMO_PATH}/assets").replace(
            "{config}", json.dumps(config).replace("<", "\\u003c")
        )
        return HTMLResponse(page, headers={"cache-control": "no-cache"})

    async def asset(self, request: Request) -> Response:
        path = self.assets.get(request.path_params["name"])
        if path is None:
            return PlainTextResponse("Not Found", status_code=404)
        return FileResponse(path, media_type=_MEDIA_TYPES[path.suffix], headers={"cache-control": "no-cache"})


async def _dev_token(settings: Settings, request: Request) -> Response:
    try:
        body = await request.json()
        raw = body.get("userId") if isinstance(body, dict) else None
        user_id = check_user_id(str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else raw, "userId")
    except (ValueError, BadUserInput) as error:
        message = str(error) if isinstance(error, BadUserInput) else 'send JSON: {"userId": "<a user id>"}'
        return JSONResponse({"errors": [{"message": message, "extensions": {"code": "BAD_USER_INPUT"}}]}, 400)
    token = issue_token(settings, user_id, min(DEV_TOKEN_TTL_SECONDS, settings.jwt_max_lifetime_seconds))
    return JSONResponse({"token": token, "userId": user_id}, headers={"cache-control": "no-store"})


def demo_routes(settings: Settings) -> list[Route]:
    """The routes this environment serves: none in production unless CHATGQL_DEMO is on."""
    routes = []
    if settings.demo_enabled:
        files = DemoFiles()

        async def page(request: Request) -> Response:
            return files.page(settings, request)

        routes += [
            Route(DEMO_PATH, page),
            Route(f"{DEMO_PATH}/", page),
            Route(f"{DEMO_PATH}/assets/{{name}}", files.asset),
        ]
    if settings.dev_sign_in_enabled:

        async def dev_token(request: Request) -> Response:
            return await _dev_token(settings, request)

        routes.append(Route(DEV_TOKEN_PATH, dev_token, methods=["POST"]))
    return routes
