"""GraphiQL, served by chatgql itself: the page and its assets come from the package
(src/chatgql/static/graphiql, fetched from npm at pinned versions by
scripts/vendor-graphiql.py), so the page works without internet.

GET /graphql (Accept: text/html) -> the page; GET /graphiql/assets/<name> -> a file
listed in manifest.json. Asset names carry their version: cached for a year.

The page opens with chatgql's example operations (examples.py), one tab each. In
development it also has a Sign-in panel (POST /dev/token, demo.py): operations whose
Authorization header is missing or still the placeholder run with its token.
"""

from __future__ import annotations

import json
import uuid
from importlib import resources
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response

from ..edge.demo import DEV_TOKEN_PATH
from .examples import default_tabs

ASSETS_PATH = "/graphiql/assets"
_MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_CACHE_FOREVER = "public, max-age=31536000, immutable"


class GraphiQLFiles:
    """The page's template and the asset files it may reference, read once at startup."""

    def __init__(self, directory: Path | None = None, *, dev_sign_in: bool = False) -> None:
        self.dev_sign_in = dev_sign_in
        self.directory = directory or Path(str(resources.files("chatgql") / "static" / "graphiql"))
        self.template = (self.directory / "index.html").read_text(encoding="utf-8")
        manifest = json.loads((self.directory / "manifest.json").read_text(encoding="utf-8"))
        self.assets = {name: self.directory / name for name in manifest["files"]}

    def page(self, request: Request) -> Response:
        root = request.scope.get("root_path", "").rstrip("/")
        config = {
            "defaultTabs": default_tabs(dev_sign_in=self.dev_sign_in, client_msg_id=str(uuid.uuid4())),
            "devTokenPath": root + DEV_TOKEN_PATH if self.dev_sign_in else None,
        }
        page = self.template.replace("{assets}", root + ASSETS_PATH).replace(
            "{config}", json.dumps(config).replace("<", "\\u003c")
        )
        return HTMLResponse(page, headers={"cache-control": "no-cache"})

    async def asset(self, request: Request) -> Response:
        path = self.assets.get(request.path_params["name"])
        if path is None:
            return PlainTextResponse("Not Found", status_code=404)
        return FileResponse(path, media_type=_MEDIA_TYPES[path.suffix], headers={"cache-control": _CACHE_FOREVER})
