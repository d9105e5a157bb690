"""The operator's moderation API (docs/guide/moderation.md): POST /operator/graphql on a chatgql with
CHATGQL_OPERATOR_TOKEN, against its PostgreSQL. Reports listed and filtered, resolved with each action
and its audit row, users banned and unbanned app-wide; refused (UNAUTHENTICATED, HTTP 401) without the
operator's token, with a wrong one or with an end-user's JWT; 404 on a chatgql without the setting."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import websockets
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from chatgql.settings import load_settings

from ..conftest import RunningServer, create_engine, drop_database, error_code, make_settings, scratch_database
from ..support.live import ChatApi, wait_until

TOKEN = secrets.token_urlsafe(32)
BY = "ops@example"
REPORT = """mutation($c: ID!, $s: Long!) {
  reportMessage(conversationId: $c, seq: $s, reason: HARASSMENT, details: "d") { reportId } }"""
VIEWER = "{ viewer { userId } }"
REPORTS = """query($status: ReportStatus, $c: ID, $u: ID, $after: Long! = 0) {
  reports(status: $status, conversationId: $c, userId: $u, after: $after) {
    id reporterId reportedUserId conversationId seq reason details evidence resolvedAt resolvedBy action note } }"""
RESOLVE = (
    """mutation($r: Long!, $a: ModerationActionKind!, $until: DateTime) {
  resolveReport(reportId: $r, action: $a, reason: "because", by: "%s", until: $until) {
    id action resolvedBy resolvedAt note } }"""
    % BY
)
AUDIT = "query($after: Long!) { auditLog(after: $after) { id operator action reportId userId conversationId seq until reason createdAt } }"
BAN = (
    """mutation($u: ID!, $until: DateTime, $c: ID) {
  banUser(userId: $u, reason: "spam run", by: "%s", until: $until, conversationId: $c) }"""
    % BY
)
UNBAN = 'mutation($u: ID!) { unbanUser(userId: $u, reason: "appeal", by: "%s") }' % BY


@pytest.fixture(scope="module")
async def operated_url(migrated_url: str) -> AsyncIterator[str]:
    """A database of the module's own: its server's relay is the only one, so the bans' events reach it."""
    yield await scratch_database(migrated_url, "operator_api")
    await drop_database(migrated_url, "operator_api")


@pytest.fixture(scope="module")
async def operated(operated_url: str) -> AsyncIterator[RunningServer]:
    async with RunningServer(make_settings(operated_url, operator_token=TOKEN)) as running:
        yield running


@pytest.fixture(scope="module")
async def own_engine(operated, operated_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(operated_url, pool_size=1, max_overflow=0)
    yield engine
    await engine.dispose()


@pytest.fixture
def api(operated, http) -> ChatApi:
    return ChatApi.of(operated, http)


def operator_url(server: RunningServer) -> str:
    return f"http://127.0.0.1:{server.port}/operator/graphql"


async def call(http, server, query: str, variables: dict | None = None, *, authorization: str | None = None):
    headers = {"authorization": authorization if authorization is not None else f"Bearer {TOKEN}"}
    return await http.post(operator_url(server), json={"query": query, "variables": variables or {}}, headers=headers)


async def data(http, server, query: str, variables: dict | None = None) -> dict:
    response = await call(http, server, query, variables)
    assert response.status_code == 200, response.text
    body = response.json()
    assert "errors" not in body, body
    return body["data"]


async def error(http, server, query: str, variables: dict | None = None) -> dict:
    response = await call(http, server, query, variables)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["data"] is None and len(body["errors"]) == 1, body
    return body["errors"][0]


def users(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:10]
    return [f"opapi-{tag}-{i}" for i in range(n)]


async def reported(api: ChatApi, reporter: str, cid: str, seq: int) -> int:
    return int((await api.data(REPORT, {"c": cid, "s": seq}, user=reporter))["reportMessage"]["reportId"])


async def audit_of(http, server, report_id: int | None = None, user_id: str | None = None) -> list[dict]:
    rows: list[dict] = []
    after = 0
    while page := (await data(http, server, AUDIT, {"after": after}))["auditLog"]:
        rows += page
        after = page[-1]["id"]
    return [
        row for row in rows if (report_id and row["reportId"] == report_id) or (user_id and row["userId"] == user_id)
    ]


async def test_reports_are_listed_and_filtered(api, operated, http):
    reporter, sender, other = users(3)
    one = await api.create_group(other, [reporter, sender])
    two = await api.create_group(other, [reporter, sender])
    await api.send(sender, one, "awful")
    await api.send(other, two, "b")
    first = await reported(api, reporter, one, 1)
    second = await reported(api, reporter, two, 1)
    listed = (await data(http, operated, REPORTS, {"after": first - 1}))["reports"]
    assert [r["id"] for r in listed][:2] == [first, second]
    report = listed[0]
    assert (report["reporterId"], report["reportedUserId"], report["conversationId"], report["seq"]) == (
        reporter,
        sender,
        one,
        1,
    )
    assert report["evidence"]["body"] == "awful" and report["resolvedAt"] is None  # evidence as JSON
    by_conversation = (await data(http, operated, REPORTS, {"c": two}))["reports"]
    assert [r["id"] for r in by_conversation] == [second]
    by_user = (await data(http, operated, REPORTS, {"u": sender}))["reports"]
    assert [r["id"] for r in by_user] == [first]
    await data(http, operated, RESOLVE, {"r": first, "a": "DISMISS"})
    opened = (await data(http, operated, REPORTS, {"status": "OPEN", "after": first - 1}))["reports"]
    resolved = (await data(http, operated, REPORTS, {"status": "RESOLVED", "after": first - 1}))["reports"]
    assert first not in [r["id"] for r in opened] and second in [r["id"] for r in opened]
    assert first in [r["id"] for r in resolved] and second not in [r["id"] for r in resolved]


async def test_each_action_resolves_the_report_and_is_audited(api, operated, http, own_engine):
    reporter, sender, owner = users(3)
    cid = await api.create_group(owner, [reporter, sender])
    for body in ("a", "b", "c", "d"):
        await api.send(sender, cid, body)
    ids = {
        action: await reported(api, reporter, cid, seq)
        for seq, action in enumerate(("DISMISS", "DELETE_MESSAGE", "BAN_FROM_CONVERSATION", "BAN_APP"), start=1)
    }
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    for action, report_id in ids.items():
        variables = {"r": report_id, "a": action, "until": until.isoformat() if action.startswith("BAN") else None}
        done = (await data(http, operated, RESOLVE, variables))["resolveReport"]
        assert (done["id"], done["action"], done["resolvedBy"], done["note"]) == (report_id, action, BY, "because")
        assert done["resolvedAt"] is not None
        [entry] = await audit_of(http, operated, report_id=report_id)
        assert (entry["operator"], entry["action"], entry["reason"], entry["userId"]) == (BY, action, "because", sender)
        assert entry["conversationId"] == cid and entry["seq"] == list(ids).index(action) + 1
        assert entry["until"] == (until.isoformat() if action.startswith("BAN") else None)
    async with own_engine.connect() as conn:
        deleted = await conn.scalar(
            text("SELECT deleted_at IS NOT NULL FROM message WHERE conversation_id = :c AND seq = 2"), {"c": int(cid)}
        )
        kept_out = await conn.scalar(
            text("SELECT count(*) FROM conversation_ban WHERE conversation_id = :c AND user_id = :u"),
            {"c": int(cid), "u": sender},
        )
        app_banned = await conn.scalar(text("SELECT count(*) FROM user_ban WHERE user_id = :u"), {"u": sender})
    assert deleted and kept_out == 1 and app_banned == 1
    again = await error(http, operated, RESOLVE, {"r": ids["DISMISS"], "a": "DISMISS"})
    assert error_code(again) == "CONFLICT"
    assert len(await audit_of(http, operated, report_id=ids["DISMISS"])) == 1  # a refusal audits nothing


async def test_a_user_is_banned_and_unbanned_app_wide(api, operated, http):
    banned, friend = users(2)
    await api.create_group(friend, [banned])
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(days=7)
    assert (await data(http, operated, BAN, {"u": banned, "until": until.isoformat()}))["banUser"] is True

    async def refused() -> bool:
        body = await api.execute(VIEWER, user=banned)
        return bool(body.get("errors")) and body["errors"][0]["extensions"].get("reason") == "BANNED"

    await wait_until(refused, 30, "the ban reaches the process's ban list")
    assert (await api.data(VIEWER, user=friend))["viewer"]["userId"] == friend  # nobody else
    assert (await data(http, operated, UNBAN, {"u": banned}))["unbanUser"] is True

    async def accepted() -> bool:
        return "errors" not in await api.execute(VIEWER, user=banned)

    await wait_until(accepted, 30, "the lifted ban reaches the process's ban list")
    assert (await data(http, operated, UNBAN, {"u": banned}))["unbanUser"] is False  # no ban left
    audited = await audit_of(http, operated, user_id=banned)
    assert [(e["action"], e["operator"], e["reason"]) for e in audited] == [
        ("BAN_APP", BY, "spam run"),
        ("UNBAN_APP", BY, "appeal"),
    ]
    assert audited[0]["until"] == until.isoformat()


async def test_a_user_is_banned_from_one_group(api, operated, http):
    banned, owner = users(2)
    cid = await api.create_group(owner, [banned])
    assert (await data(http, operated, BAN, {"u": banned, "c": cid}))["banUser"] is True
    error_body = await api.error(
        "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id } }",
        {"c": cid, "u": [banned]},
        user=owner,
    )
    assert error_code(error_body) == "FORBIDDEN" and error_body["extensions"]["reason"] == "USER_BANNED"
    [entry] = await audit_of(http, operated, user_id=banned)
    assert (entry["action"], entry["conversationId"], entry["until"]) == ("BAN_FROM_CONVERSATION", cid, None)


async def test_bad_input_is_a_coded_error(operated, http):
    missing = await error(http, operated, RESOLVE, {"r": 2**62, "a": "DISMISS"})
    assert error_code(missing) == "NOT_FOUND"
    blank = await error(
        http, operated, 'mutation { resolveReport(reportId: 1, action: DISMISS, reason: " ", by: "x") { id } }'
    )
    assert error_code(blank) == "BAD_USER_INPUT"
    nobody = await error(http, operated, 'mutation { unbanUser(userId: "u", reason: "r", by: " ") }')
    assert error_code(nobody) == "BAD_USER_INPUT"
    past = await error(http, operated, BAN, {"u": "u", "until": "2000-01-01T00:00:00+00:00"})
    assert error_code(past) == "BAD_USER_INPUT"
    bad_conversation = await error(http, operated, REPORTS, {"c": "not-a-conversation"})
    assert error_code(bad_conversation) == "BAD_USER_INPUT"
    response = await call(http, operated, "{ reports(status: CLOSED) { id } }")
    assert response.status_code in (200, 400) and error_code(response.json()["errors"][0]) == "BAD_USER_INPUT"


@pytest.mark.parametrize(
    "authorization",
    ["", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN, "Bearer"],
    ids=["no header", "wrong secret", "wrong scheme", "no scheme", "no secret"],
)
async def test_anything_but_the_operator_token_is_refused(operated, http, own_engine, authorization):
    async with own_engine.connect() as conn:
        before = await conn.scalar(text("SELECT count(*) FROM moderation_action"))
    if authorization:
        response = await call(http, operated, UNBAN, {"u": "someone"}, authorization=authorization)
    else:
        response = await http.post(operator_url(operated), json={"query": UNBAN, "variables": {"u": "someone"}})
    assert response.status_code == 401
    body = response.json()
    assert body["data"] is None and [error_code(e) for e in body["errors"]] == ["UNAUTHENTICATED"]
    async with own_engine.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM moderation_action")) == before


async def test_an_end_user_token_is_refused(api, operated, http):
    user = users(1)[0]
    assert (await api.data(VIEWER, user=user))["viewer"]["userId"] == user  # a real user's valid token
    response = await call(http, operated, "{ reports { id } }", authorization=f"Bearer {api.token(user)}")
    assert response.status_code == 401
    assert [error_code(e) for e in response.json()["errors"]] == ["UNAUTHENTICATED"]


async def test_no_graphiql_page_and_no_websocket(operated, http):
    page = await http.get(operator_url(operated), headers={"accept": "text/html", "authorization": f"Bearer {TOKEN}"})
    assert page.status_code in (404, 405) and "graphiql" not in page.text.lower()
    with pytest.raises(websockets.InvalidStatus):
        async with websockets.connect(
            operator_url(operated).replace("http://", "ws://"),
            subprotocols=["graphql-transport-ws"],
            additional_headers={"authorization": f"Bearer {TOKEN}"},
        ):
            pass


def test_a_short_operator_token_is_refused_at_start():
    with pytest.raises(ValidationError, match="CHATGQL_OPERATOR_TOKEN must be a long random secret"):
        load_settings(operator_token="short-secret")
    assert load_settings(operator_token=TOKEN).operator_token.get_secret_value() == TOKEN


async def test_without_the_setting_the_path_is_not_found(server, http):
    response = await http.post(
        f"http://127.0.0.1:{server.port}/operator/graphql",
        json={"query": "{ reports { id } }"},
        headers={"authorization": f"Bearer {TOKEN}"},
    )
    assert response.status_code == 404
