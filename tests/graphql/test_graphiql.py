"""GraphiQL is served by chatgql itself: no external origin in the page, every asset
it references served from the package, with the versions manifest.json records."""

from __future__ import annotations

import hashlib
import json
import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import httpx

from chatgql.graphql.graphiql import GraphiQLFiles

from ..conftest import GraphQLClient, RunningServer, make_settings

MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "action", "srcset", "poster", "data") and value:
                self.urls.append(value)


async def _page(http: httpx.AsyncClient, url: str) -> httpx.Response:
    return await http.get(url, headers={"accept": "text/html"})


async def test_graphiql_page_references_no_external_origin(client: GraphQLClient, http: httpx.AsyncClient):
    page = await _page(http, client.url)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    parser = _References()
    parser.feed(page.text)
    assert len(parser.urls) >= 6  # react, react-dom, graphiql js + css, explorer js + css
    for url in parser.urls:
        assert url.startswith("data:") or not urlsplit(url).netloc, url
    # Nor anywhere else in the page (an inline script, a style): no http(s):// and no //host.
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", page.text, re.IGNORECASE), page.text
    assert "unpkg" not in page.text and "cdn" not in page.text.lower()


async def test_every_asset_the_page_references_is_served_with_its_type_and_cached(
    client: GraphQLClient, http: httpx.AsyncClient
):
    page = await _page(http, client.url)
    parser = _References()
    parser.feed(page.text)
    assets = [url for url in parser.urls if not url.startswith("data:")]
    files = GraphiQLFiles()
    manifest = json.loads((files.directory / "manifest.json").read_text())["files"]
    for url in assets:
        response = await http.get(urljoin(client.url, url))
        assert response.status_code == 200, url
        name = url.rsplit("/", 1)[1]
        assert response.headers["content-type"] == MEDIA_TYPES["." + name.rsplit(".", 1)[1]], url
        assert "immutable" in response.headers["cache-control"]
        assert hashlib.sha256(response.content).hexdigest() == manifest[name]["sha256"], url
    assert sorted(url.rsplit("/", 1)[1] for url in assets) == sorted(manifest)


async def test_only_listed_assets_are_served(client: GraphQLClient, http: httpx.AsyncClient):
    base = urljoin(client.url, "/graphiql/assets/")
    for name in ("manifest.json", "index.html", "LICENSES.txt", "..%2Fgraphiql.py", "nope.js"):
        assert (await http.get(base + name)).status_code == 404, name


async def test_production_serves_no_graphiql_assets(migrated_url: str, http: httpx.AsyncClient):
    settings = make_settings(migrated_url, env="production", jwt_secret="a-production-secret-for-tests-only-0123456789")
    async with RunningServer(settings) as server:
        assert (await _page(http, server.url)).status_code == 404
        asset = urljoin(server.url, "/graphiql/assets/graphiql-3.8.3.min.js")
        assert (await http.get(asset)).status_code == 404


def test_manifest_matches_the_shipped_files():
    files = GraphiQLFiles()
    manifest = json.loads((files.directory / "manifest.json").read_text())
    assert {package["name"] for package in manifest["packages"]} == {
        "react",
        "react-dom",
        "graphiql",
        "@graphiql/plugin-explorer",
    }
    assert all(package["license"] == "MIT" for package in manifest["packages"])
    for name, entry in manifest["files"].items():
        data = (files.directory / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
        assert b"sourceMappingURL" not in data[-300:], name  # a map that is not shipped would 404
