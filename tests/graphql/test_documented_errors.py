"""The error messages the docs quote are the server's. Every backticked message of README.md,
docs/guide/*.md and docs/operating/*.md (prose in backticks: words, not code or commands) must be
one that the server can produce: a string literal of src/chatgql (or of the Strawberry websocket
protocols it serves), or an f-string there with its holes filled (a quote's `…` or `<claim>` stands
for a hole). Those a client can provoke with an HS256 token or an
argument are provoked against the session's chatgql, and the answer must be one the docs quote
exactly (the identity provider's are provoked in tests/identity/test_keycloak.py)."""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import jwt
import pytest
import strawberry.subscriptions.protocols

from ..conftest import REPO, GraphQLClient

PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs" / "guide").glob("*.md")),
    *sorted((REPO / "docs" / "operating").glob("*.md")),
]
SPAN = re.compile(r"`([^`]+)`")
HOLE = re.compile(r"…|<[^>]+>")
COMMANDS = {"chatgql", "python", "pip", "npm", "ps"}


def _prose(text: str) -> str:
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
        elif not fenced:
            lines.append(line)
    return "\n".join(lines)


def _is_message(text: str) -> bool:
    """Prose in backticks: three words or more, two of them lower-case words; no code, path or command."""
    words = text.split()
    if len(words) < 3 or words[0] in COMMANDS or not text[0].isalpha():
        return False
    if re.search(r"\w\(|[{}=$\[\]/|]|--| - |^\w+:", text):
        return False
    return sum(bool(re.fullmatch(r"[a-z][a-z'’,]*", word)) for word in words) >= 2


def quoted_messages() -> dict[str, str]:
    """message -> the page that quotes it (a quote may span lines)."""
    found = {}
    for page in PAGES:
        for span in SPAN.finditer(_prose(page.read_text())):
            text = " ".join(span.group(1).split())
            if _is_message(text):
                found.setdefault(text, page.relative_to(REPO).as_posix())
    return found


def _sources() -> list[Path]:
    """chatgql's modules, and the websocket protocols' of Strawberry, which chatgql serves them through."""
    protocols = Path(strawberry.subscriptions.protocols.__file__).parent
    return [*(REPO / "src" / "chatgql").rglob("*.py"), *protocols.rglob("*.py")]


def source_templates() -> list[re.Pattern]:
    """Every string of the sources with a space in it, as a pattern: an f-string's holes match anything."""
    patterns = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                literal = " ".join(v.value for v in node.values if isinstance(v, ast.Constant))
                if len(re.findall(r"[A-Za-z]{2,}", literal)) < 2:
                    continue  # f"{a} {b}": a layout, not a message
                parts = [re.escape(v.value) if isinstance(v, ast.Constant) else "(?:.+)" for v in node.values]
                patterns.append(re.compile("".join(parts), re.DOTALL))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value:
                patterns.append(re.compile(re.escape(node.value), re.DOTALL))
    return patterns


def _quote_pattern(quote: str) -> re.Pattern:
    return re.compile(".+".join(re.escape(part) for part in HOLE.split(quote)), re.DOTALL)


def produced_by_source(quote: str, templates: list[re.Pattern]) -> bool:
    """The quote, its holes filled, is what some template makes; or a whole string of the source
    (no holes of its own) is what the quote's holes allow."""
    sample = HOLE.sub("x", quote)
    pattern = _quote_pattern(quote)
    for template in templates:
        if template.fullmatch(sample):
            return True
        if "(?:.+)" not in template.pattern and pattern.fullmatch(re.sub(r"\\(.)", r"\1", template.pattern)):
            return True
    return False


QUOTED = quoted_messages()


def test_the_docs_quote_messages_and_code_is_left_out():
    assert "the token has expired" in QUOTED and "Too many messages" in QUOTED
    assert not any(quote.startswith(("chatgql ", "python ")) for quote in QUOTED)


@pytest.fixture(scope="module")
def templates() -> list[re.Pattern]:
    return source_templates()


@pytest.mark.parametrize("quote", sorted(QUOTED), ids=lambda quote: quote[:60])
def test_a_quoted_message_is_one_the_server_makes(quote: str, templates: list[re.Pattern]):
    assert produced_by_source(quote, templates), f"{QUOTED[quote]} quotes {quote!r}, which the server never says"


def test_a_message_the_server_does_not_make_is_caught(templates: list[re.Pattern]):
    assert not produced_by_source("the token has no user id at sub", templates)
    assert not produced_by_source("the token has no user id at <path>", templates)


def _documented(message: str) -> bool:
    return any(
        quote == message or ("…" in quote or "<" in quote) and _quote_pattern(quote).fullmatch(message)
        for quote in QUOTED
    )


def _token(client: GraphQLClient, claims: dict, secret: str | None = None) -> str:
    key = secret or client.settings.jwt_secret.get_secret_value()
    return jwt.encode(claims, key, algorithm="HS256")


async def _refusal(client: GraphQLClient, token: str) -> tuple[str, str]:
    body = await client.execute("{ viewer { userId } }", headers={"authorization": f"Bearer {token}"})
    (error,) = body["errors"]
    return error["extensions"]["code"], error["message"]


async def test_token_refusals_say_what_the_docs_quote(client: GraphQLClient):
    now = int(time.time())
    longest = client.settings.jwt_max_lifetime_seconds
    cases = {
        "no sub": {"exp": now + 60},
        "a number as sub": {"sub": 7, "exp": now + 60},
        "an empty sub": {"sub": "", "exp": now + 60},
        "expired": {"sub": "1", "exp": now - 3600},
        "an audience": {"sub": "1", "exp": now + 60, "aud": "another-service"},
        "too long a life": {"sub": "1", "iat": now, "exp": now + longest + 3600},
    }
    answers = {name: await _refusal(client, _token(client, claims)) for name, claims in cases.items()}
    answers["another key"] = await _refusal(client, _token(client, {"sub": "1", "exp": now + 60}, "x" * 40))
    assert answers["no sub"][1] == "the token has no sub claim"
    assert answers["a number as sub"][1] == "the token's sub is not a string"
    for name, (code, message) in answers.items():
        assert code == "UNAUTHENTICATED", (name, code)
        assert _documented(message), f"{name}: the server says {message!r}, which the docs do not quote"


async def test_input_limit_refusals_say_what_the_docs_quote(client: GraphQLClient):
    cid = (await client.data('mutation { createGroup(title: "t", memberIds: ["2"]) { id } }', user=1))["createGroup"][
        "id"
    ]
    send = 'mutation($c: ID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: "6f1c6a52-5a3e-4a43-9e0d-3b7d1f7c2a11", body: $b) { duplicate } }'
    error = await client.error(send, {"c": cid, "b": "x" * (client.settings.max_body_chars + 1)}, user=1)
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["message"] == "body is longer than 4000 characters" and _documented(error["message"])
