"""The reference web chat at /demo and the development sign-in at /dev/token: served in
development, refused in production (404, as any unknown path), the sign-in never in
production even with CHATGQL_DEMO on; the committed build matches its sources.
The web chat itself, in a browser: tests/test_webchat_browser.py."""

from __future__ import annotations

import hashlib
import json
import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from chatgql.edge.demo import DemoFiles
from chatgql.server.app import create_app

from .conftest import REPO, GraphQLClient, error_code, make_settings

WEBCHAT = REPO / "webchat"
PRODUCTION_SECRET = "a-production-secret-for-tests-only-0123456789"


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def _demo_url(client: GraphQLClient) -> str:
    return urljoin(client.url, "/demo")


async def test_the_demo_page_and_its_built_files_are_served_in_development(
    client: GraphQLClient, http: httpx.AsyncClient
):
    page = await http.get(_demo_url(client))
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    config = json.loads(re.search(r'id="chatgql-config" type="application/json">([^<]*)<', page.text).group(1))
    assert config == {
        "graphqlPath": "/graphql",
        "devTokenPath": "/dev/token",
        "maxBodyChars": 4000,
        "maxTitleChars": 200,
    }
    parser = _References()
    parser.feed(page.text)
    assets = [url for url in parser.urls if not url.startswith("data:")]
    assert sorted(url.rsplit("/", 1)[1] for url in assets) == ["webchat.css", "webchat.js"]
    manifest = json.loads((DemoFiles().directory / "manifest.json").read_text())["files"]
    for url in assets:
        assert not urlsplit(url).netloc, url  # nothing from outside this server
        response = await http.get(urljoin(client.url, url))
        assert response.status_code == 200, url
        assert hashlib.sha256(response.content).hexdigest() == manifest[url.rsplit("/", 1)[1]]["sha256"], url
    for name in ("manifest.json", "index.html", "LICENSES.txt", "..%2Fdemo.py", "nope.js"):
        assert (await http.get(urljoin(client.url, f"/demo/assets/{name}"))).status_code == 404, name


async def test_the_dev_sign_in_mints_a_token_the_api_accepts(client: GraphQLClient, http: httpx.AsyncClient):
    response = await http.post(urljoin(client.url, "/dev/token"), json={"userId": "42"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["userId"] == "42"
    viewer = await http.post(
        client.url, json={"query": "{ viewer { userId } }"}, headers={"authorization": f"Bearer {body['token']}"}
    )
    assert viewer.json() == {"data": {"viewer": {"userId": "42"}}}


@pytest.mark.parametrize(
    "body", [{"userId": ""}, {"userId": "u" * 256}, {"userId": "a\nb"}, {"userId": True}, {}, [1], "not json"]
)
async def test_the_dev_sign_in_refuses_what_is_not_a_user_id(client: GraphQLClient, http: httpx.AsyncClient, body):
    content = body if isinstance(body, str) else json.dumps(body)
    response = await http.post(urljoin(client.url, "/dev/token"), content=content)
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error_code(error) == "BAD_USER_INPUT"
    assert "token" not in response.json()


async def test_the_dev_sign_in_takes_only_post(client: GraphQLClient, http: httpx.AsyncClient):
    assert (await http.get(urljoin(client.url, "/dev/token"))).status_code == 405


def _app(**overrides) -> httpx.AsyncClient:
    """An app of these settings, asked without its lifespan: these routes need no database."""
    settings = make_settings("postgresql://unused@127.0.0.1:1/unused", **overrides)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://chatgql")


async def test_production_refuses_the_demo_the_sign_in_and_graphiql():
    async with _app(env="production", jwt_secret=PRODUCTION_SECRET) as http:
        for path in ("/demo", "/demo/", "/demo/assets/webchat.js"):
            assert (await http.get(path)).status_code == 404, path
        response = await http.post("/dev/token", json={"userId": "1"})
        assert response.status_code == 404
        assert "token" not in response.text
        assert (await http.get("/graphql", headers={"accept": "text/html"})).status_code == 404


async def test_production_with_the_demo_on_serves_it_without_a_sign_in():
    async with _app(env="production", jwt_secret=PRODUCTION_SECRET, demo=True) as http:
        page = await http.get("/demo")
        assert page.status_code == 200
        assert '"devTokenPath": null' in page.text  # the page asks for a token instead
        assert (await http.get("/demo/assets/webchat.js")).status_code == 200
        assert (await http.post("/dev/token", json={"userId": "1"})).status_code == 404


async def test_development_can_turn_the_demo_off():
    async with _app(demo=False) as http:
        assert (await http.get("/demo")).status_code == 404


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_committed_build_matches_its_sources():
    """webchat/build.mjs records the sha256 of every input it built from; a source changed
    since is a build not redone (cd webchat && npm ci && npm run build)."""
    files = DemoFiles()
    manifest = json.loads((files.directory / "manifest.json").read_text())
    sources = ["build.mjs", "index.html", "package.json", "package-lock.json"]
    sources += [f"src/{path.name}" for path in sorted((WEBCHAT / "src").iterdir())]
    assert manifest["development"] is False, "a development build (WEBCHAT_DEVELOPMENT=1) was committed"
    assert sorted(manifest["inputs"]) == sorted(sources), "files were added to or removed from webchat/"
    stale = [name for name in sources if _sha256(WEBCHAT / name) != manifest["inputs"][name]]
    assert not stale, f"changed since the last build (cd webchat && npm ci && npm run build): {stale}"
    for name, entry in manifest["files"].items():
        assert _sha256(files.directory / name) == entry["sha256"], name
    assert (files.directory / "index.html").read_bytes() == (WEBCHAT / "index.html").read_bytes()


def test_the_build_toolchain_and_libraries_are_pinned():
    package = json.loads((WEBCHAT / "package.json").read_text())
    lock = json.loads((WEBCHAT / "package-lock.json").read_text())
    for name, version in {**package["dependencies"], **package["devDependencies"]}.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} {version} is not an exact version"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
