"""GraphiQL, served by chatgql itself: the page and its assets come from the package
(src/chatgql/static/graphiql, fetched from npm at pinned versions by
scripts/vendor-graphiql.py), so the page works without internet.

GET /graphql (Accept: text/html) -> the page; GET /graphiql/assets/<name> -> a file
listed in manifest.json. Asset names carry their version: cached for a year.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response

ASSETS_PATH = "/graphiql/assets"
_MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_CACHE_FOREVER = "public, max-age=31536000, immutable"


class GraphiQLFiles:
    """The page's template and the asset files it may reference, read once at startup."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or Path(str(resources.files("chatgql") / "static" / "graphiql"))
        self.template = (self.directory / "index.html").read_text(encoding="utf-8")
        manifest = json.loads((self.directory / "manifest.json").read_text(encoding="utf-8"))
        self.assets = {name: self.directory / name for name in manifest["files"]}

    def page(self, request: Request) -> Response:
        assets = request.scope.get("root_path", "").rstrip("/") + ASSETS_PATH
        return HTMLResponse(self.template.replace("{assets}", assets), headers={"cache-control": "no-cache"})

    async def asset(self, request: Request) -> Response:
        path = self.assets.get(request.path_params["name"])
        if path is None:
            return PlainTextResponse("Not Found", status_code=404)
        return FileResponse(path, media_type=_MEDIA_TYPES[path.suffix], headers={"cache-control": _CACHE_FOREVER})
