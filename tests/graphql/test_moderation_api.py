"""The operator's moderation (docs/guide/moderation.md): reports listed and filtered, resolved with an
action (dismiss, delete the message, ban from the conversation, ban app-wide), each action audited;
an app-wide ban refuses the user's token everywhere (HTTP, a new websocket, the live ones end at once)
until it ends, and no message of theirs is stored after it has committed. Through the services and
through `chatgql reports` / `ban` / `unban` against the session's chatgql and its PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from websockets.exceptions import ConnectionClosed

from chatgql.services import operator as moderation
from chatgql.services.erase import erase_user

from ..conftest import REPO, error_code
from ..support.live import (
    ChatApi,
    ConnectionRefused,
    SubscriptionError,
    wait_active_subscriptions,
    wait_until,
    ws_connect,
)

REPORT = """mutation($c: ID!, $s: Long!) {
  reportMessage(conversationId: $c, seq: $s, reason: HARASSMENT, details: "d") { reportId } }"""
SEND = """mutation($c: ID!, $m: UUID!) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: "x") { message { seq } } }"""
VIEWER = "{ viewer { userId } }"
LAST_SEQ = "query($c: ID!) { conversation(id: $c) { lastSeq } }"
OPERATOR = "ops@example"


@pytest.fixture
def database(server):
    return server.runtime.deps.database


def users(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:10]
    return [f"mod-{tag}-{i}" for i in range(n)]


async def reported(api: ChatApi, reporter: str, cid: str, seq: int) -> int:
    return int((await api.data(REPORT, {"c": cid, "s": seq}, user=reporter))["reportMessage"]["reportId"])


async def audit(engine, report_id: int | None = None, user_id: str | None = None) -> list[dict]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT operator, action, reason, report_id, user_id, until, created_at FROM moderation_action "
                "WHERE report_id = :r OR user_id = :u ORDER BY id"
            ),
            {"r": report_id, "u": user_id},
        )
        return [dict(row._mapping) for row in rows]


async def test_reports_are_listed_by_status_conversation_and_user(api, database):
    reporter, sender, other = users(3)
    one = await api.create_group(other, [reporter, sender])
    two = await api.create_group(other, [reporter, sender])
    await api.send(sender, one, "a")
    await api.send(other, two, "b")
    first = await reported(api, reporter, one, 1)
    second = await reported(api, reporter, two, 1)
    await moderation.do_resolve_report(database, OPERATOR, first, moderation.DISMISS, "not abusive")

    async def ids(**wanted: object) -> list[int]:
        rows = await moderation.list_reports(database, moderation.ReportFilter(**wanted), after_id=first - 1)  # type: ignore[arg-type]
        return [row["id"] for row in rows if row["id"] in (first, second)]

    assert await ids() == [first, second]
    assert await ids(status="OPEN") == [second]
    assert await ids(status="RESOLVED") == [first]
    assert await ids(conversation_id=int(two)) == [second]
    assert await ids(user_id=sender) == [first]
    assert await ids(user_id=other, status="OPEN") == [second]
    rows = await moderation.list_reports(database, moderation.ReportFilter(user_id=sender))
    assert rows[0]["reporter_id"] == reporter and rows[0]["evidence"]  # the operator sees who and what


async def test_each_action_is_audited_and_a_report_is_resolved_once(api, database, engine):
    reporter, sender = users(2)
    cid = await api.create_group(reporter, [sender])
    await api.send(sender, cid, "awful")
    report_id = await reported(api, reporter, cid, 1)
    done = await moderation.do_resolve_report(database, OPERATOR, report_id, moderation.DELETE_MESSAGE, "abuse")
    assert done["action"] == "DELETE_MESSAGE" and done["resolved_by"] == OPERATOR and done["resolved_at"] is not None
    message = await api.data(
        "query($c: ID!) { messages(conversationId: $c, first: 1) { nodes { body deletedAt deletedBy } } }",
        {"c": cid},
        user=reporter,
    )
    node = message["messages"]["nodes"][0]
    assert node["body"] == "" and node["deletedAt"] is not None and node["deletedBy"] is None  # the operator
    assert done["evidence"]["body"] == "awful"  # the evidence stays
    [entry] = await audit(engine, report_id=report_id)
    assert (entry["operator"], entry["action"], entry["reason"], entry["user_id"]) == (
        OPERATOR,
        "DELETE_MESSAGE",
        "abuse",
        sender,
    )
    for action, code in ((moderation.DISMISS, "CONFLICT"),):
        with pytest.raises(Exception) as refused:
            await moderation.do_resolve_report(database, OPERATOR, report_id, action, "again")
        assert refused.value.code == code  # type: ignore[attr-defined]
    with pytest.raises(Exception) as missing:
        await moderation.do_resolve_report(database, OPERATOR, 2**62, moderation.DISMISS, "x")
    assert missing.value.code == "NOT_FOUND"  # type: ignore[attr-defined]
    with pytest.raises(Exception) as unexplained:
        await moderation.do_resolve_report(database, OPERATOR, report_id, moderation.DISMISS, "  ")
    assert unexplained.value.code == "BAD_USER_INPUT"  # type: ignore[attr-defined]
    assert len(await audit(engine, report_id=report_id)) == 1  # refusals audit nothing


async def test_a_conversation_ban_removes_the_user_and_keeps_them_out_until_it_ends(api, database, engine):
    reporter, sender, owner = users(3)
    cid = await api.create_group(owner, [reporter, sender])
    await api.send(sender, cid, "spam")
    report_id = await reported(api, reporter, cid, 1)
    until = datetime.now(UTC) + timedelta(hours=1)
    await moderation.do_resolve_report(
        database, OPERATOR, report_id, moderation.BAN_FROM_CONVERSATION, "spam", until=until
    )
    assert error_code(await api.error(SEND, {"c": cid, "m": str(uuid.uuid4())}, user=sender)) == "NOT_FOUND"
    error = await api.error(
        "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id } }",
        {"c": cid, "u": [sender]},
        user=owner,
    )
    assert error_code(error) == "FORBIDDEN" and error["extensions"]["reason"] == "USER_BANNED"
    async with engine.begin() as conn:  # the ban ends (its time passes)
        await conn.execute(
            text("UPDATE conversation_ban SET until = now() - interval '1 second' WHERE user_id = :u"), {"u": sender}
        )
    await api.add_members(owner, cid, [sender])
    [entry] = await audit(engine, report_id=report_id)
    assert entry["action"] == "BAN_FROM_CONVERSATION" and entry["until"] == until


async def test_an_app_wide_ban_refuses_the_token_everywhere_and_ends_live_sessions(api, database, server, engine):
    banned, friend = users(2)
    cid = await api.create_group(friend, [banned])
    live = await ws_connect(server, banned)
    try:
        before = server.runtime.deps.dispatcher.active
        op = await live.subscribe("subscription { messageNew { seq } }")
        await wait_active_subscriptions(server, before + 1)
        until = datetime.now(UTC) + timedelta(days=7)
        await moderation.do_ban_user(database, OPERATOR, banned, until, "harassment")
        with pytest.raises((SubscriptionError, ConnectionClosed)) as ended:  # whichever the client reads first
            await op.next()
        if isinstance(ended.value, SubscriptionError):
            assert ended.value.args[0][0]["extensions"]["reason"] == "BANNED"
        await asyncio.wait_for(live.ws.wait_closed(), 20)
        assert (live.ws.close_code, live.ws.close_reason) == (4403, "Banned")
    finally:
        await live.close()
    error = await api.error(VIEWER, user=banned)
    assert error_code(error) == "FORBIDDEN" and error["extensions"]["reason"] == "BANNED"
    assert error["extensions"]["until"] == until.isoformat()
    assert (await api.error(SEND, {"c": cid, "m": str(uuid.uuid4())}, user=banned))["extensions"]["reason"] == "BANNED"
    with pytest.raises(ConnectionRefused):
        await ws_connect(server, banned)
    assert (await api.data(VIEWER, user=friend))["viewer"]["userId"] == friend  # nobody else
    [entry] = await audit(engine, user_id=banned)
    assert (entry["action"], entry["reason"], entry["until"]) == ("BAN_APP", "harassment", until)
    assert await moderation.do_unban_user(database, OPERATOR, banned, "appeal granted")

    async def accepted() -> bool:
        return "errors" not in await api.execute(VIEWER, user=banned)

    await wait_until(accepted, 30, "the lifted ban reaches the process's ban list")
    await api.send(banned, cid, "back")
    assert [e["action"] for e in await audit(engine, user_id=banned)] == ["BAN_APP", "UNBAN_APP"]


async def test_no_message_is_stored_after_an_app_wide_ban_has_committed(api, database):
    """Many tasks of the user send into several conversations while the operator bans them: once the ban
    has answered, no conversation's lastSeq moves again, and every sender ends refused."""
    banned, friend = users(2)
    cids = [await api.create_group(friend, [banned]) for _ in range(3)]
    cids.append(
        (
            await api.data(
                "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }", {"u": friend}, user=banned
            )
        )["createDirectConversation"]["id"]
    )
    started = asyncio.Event()
    stored = 0

    async def sender(cid: str) -> str:
        nonlocal stored
        while True:
            body = await api.execute(SEND, {"c": cid, "m": str(uuid.uuid4())}, user=banned)
            if "errors" in body:
                return body["errors"][0]["extensions"].get("reason")
            stored += 1
            if stored >= 8:
                started.set()

    tasks = [asyncio.create_task(sender(cid)) for cid in cids * 3]
    await started.wait()
    await moderation.do_ban_user(database, OPERATOR, banned, None, "spam run")
    at_ban = [(await api.data(LAST_SEQ, {"c": cid}, user=friend))["conversation"]["lastSeq"] for cid in cids]
    assert await asyncio.gather(*tasks) == ["BANNED"] * len(tasks)
    after = [(await api.data(LAST_SEQ, {"c": cid}, user=friend))["conversation"]["lastSeq"] for cid in cids]
    assert after == at_ban and sum(after) == stored


async def test_erase_blanks_resolved_evidence_and_resolving_an_erased_users_report_blanks_it(api, database, engine):
    reporter, sender = users(2)
    cid = await api.create_group(reporter, [sender])
    await api.send(sender, cid, "one")
    await api.send(sender, cid, "two")
    resolved_first = await reported(api, reporter, cid, 1)
    still_open = await reported(api, reporter, cid, 2)
    await moderation.do_resolve_report(database, OPERATOR, resolved_first, moderation.DISMISS, "fine")
    await erase_user(database, sender)

    async def evidence(report_id: int) -> object:
        async with engine.connect() as conn:
            return (await conn.execute(text("SELECT evidence FROM report WHERE id = :i"), {"i": report_id})).scalar()

    assert await evidence(resolved_first) is None
    assert (await evidence(still_open))["body"] == "two"  # type: ignore[index]  # open: kept for the moderator
    await moderation.do_resolve_report(database, OPERATOR, still_open, moderation.BAN_APP, "erased anyway")
    assert await evidence(still_open) is None
    await moderation.do_unban_user(database, OPERATOR, sender, "test over")


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("CHATGQL_")}
    env.update({"CHATGQL_DATABASE_URL": database_url, "CHATGQL_MIGRATE_ON_START": "false"})
    env["PYTHONPATH"] = str(REPO / "src")
    return subprocess.run(
        [sys.executable, "-m", "chatgql.server.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_command_line_lists_resolves_bans_and_audits(api, server, suite_url):
    reporter, sender = users(2)
    cid = await api.create_group(reporter, [sender])
    await api.send(sender, cid, "bad")
    report_id = await reported(api, reporter, cid, 1)
    listed = await asyncio.to_thread(_cli, suite_url, "reports", "list", "--status", "OPEN", "--user", sender)
    assert listed.returncode == 0, listed.stderr
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["id"] == report_id and row["evidence"]["body"] == "bad" and row["reason"] == "HARASSMENT"
    resolved = await asyncio.to_thread(
        _cli, suite_url, "reports", "resolve", str(report_id), "--action", "DISMISS", "--reason", "ok", "--by", "cli"
    )
    assert resolved.returncode == 0, resolved.stderr
    assert json.loads(resolved.stdout)["action"] == "DISMISS"
    again = await asyncio.to_thread(
        _cli, suite_url, "reports", "resolve", str(report_id), "--action", "DISMISS", "--reason", "ok", "--by", "cli"
    )
    assert again.returncode == 2 and "CONFLICT" in again.stderr
    banned = await asyncio.to_thread(_cli, suite_url, "ban", sender, "--reason", "spam", "--by", "cli")
    assert banned.returncode == 0, banned.stderr
    await wait_until(
        lambda: server.runtime.deps.bans is not None and _refused(server.runtime.deps.bans, sender),
        30,
        "the ban made by another process reaches the server",
    )
    lifted = await asyncio.to_thread(_cli, suite_url, "unban", sender, "--reason", "done", "--by", "cli")
    assert lifted.returncode == 0 and "unbanned" in lifted.stdout
    trail = await asyncio.to_thread(_cli, suite_url, "reports", "audit", "--limit", "1000")
    actions = [
        (e["operator"], e["action"]) for e in map(json.loads, trail.stdout.splitlines()) if e["user_id"] == sender
    ]
    assert actions == [("cli", "DISMISS"), ("cli", "BAN_APP"), ("cli", "UNBAN_APP")]


def _refused(bans, user_id: str) -> bool:
    try:
        bans.check(user_id)
    except Exception:
        return True
    return False


def test_the_ban_lists_reload_keeps_what_an_event_told_of_meanwhile():
    """The reload (every CHATGQL_BAN_REFRESH_SECONDS) may read before a ban or an unban commits: what an
    event told of a user lately stands; older knowledge gives way to the database's."""
    from chatgql.edge.bans import BanList

    bans = BanList()
    later = datetime.now(UTC) + timedelta(hours=1)
    bans.learn("banned-by-event", later.isoformat(), True)
    bans.learn("unbanned-by-event", None, False)
    bans.replace([("unbanned-by-event", None), ("from-db", None)], keep_seconds=60)
    assert _refused(bans, "banned-by-event") and _refused(bans, "from-db")
    assert not _refused(bans, "unbanned-by-event")
    bans.replace([], keep_seconds=0)  # the events are old news: the database decides
    assert not any(_refused(bans, u) for u in ("banned-by-event", "from-db"))
    bans.replace([("ended", datetime.now(UTC) - timedelta(seconds=1))], keep_seconds=0)
    assert not _refused(bans, "ended")  # a ban whose end has passed refuses nothing
