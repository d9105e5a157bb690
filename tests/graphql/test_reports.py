"""Reports (docs/guide/moderation.md): a member reports a message of their conversation, anyone reports a
user, with a reason of the documented set and free text; the report keeps the message as it was when
reported (a later edit, delete or erase leaves the evidence as it was); reporting twice stores one report;
nothing of a report reaches the reported user. Against the session's chatgql and its PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import text

from chatgql.services.erase import erase_user

from ..conftest import RunningServer, error_code, make_settings
from ..support.live import ChatApi

REPORT_MESSAGE = """mutation($c: ID!, $s: Long!, $r: ReportReason!, $d: String!) {
  reportMessage(conversationId: $c, seq: $s, reason: $r, details: $d) { reportId duplicate } }"""
REPORT_USER = """mutation($u: ID!, $r: ReportReason!) { reportUser(userId: $u, reason: $r) { reportId duplicate } }"""
EDIT = "mutation($c: ID!, $s: Long!, $b: String!) { editMessage(conversationId: $c, seq: $s, body: $b) { changeSeq } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"


def users(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:10]
    return [f"rep-{tag}-{i}" for i in range(n)]


async def evidence(engine, report_id: str) -> dict:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT reporter_id, reported_user_id, reason, details, evidence FROM report WHERE id = :i"),
                {"i": int(report_id)},
            )
        ).one()
    return dict(row._mapping)


async def test_a_report_keeps_the_message_as_it_was_through_edit_delete_and_erase(api, engine, server):
    reporter, sender, other = users(3)
    cid = await api.create_group(other, [reporter, sender])
    await api.send(sender, cid, "the abusive words")
    first = (
        await api.data(REPORT_MESSAGE, {"c": cid, "s": 1, "r": "HARASSMENT", "d": " threatening "}, user=reporter)
    )["reportMessage"]
    assert first["duplicate"] is False
    await api.data(EDIT, {"c": cid, "s": 1, "b": "harmless now"}, user=sender)
    again = (await api.data(REPORT_MESSAGE, {"c": cid, "s": 1, "r": "SPAM", "d": ""}, user=reporter))["reportMessage"]
    assert again == {"reportId": first["reportId"], "duplicate": True}  # the first report stands
    await api.data(DELETE, {"c": cid, "s": 1}, user=sender)
    await erase_user(server.runtime.deps.database, sender)
    kept = await evidence(engine, first["reportId"])
    assert kept["reporter_id"] == reporter and kept["reported_user_id"] == sender
    assert kept["reason"] == "HARASSMENT" and kept["details"] == "threatening"
    assert kept["evidence"]["body"] == "the abusive words" and kept["evidence"]["attachments"] == []


async def test_report_refusals_are_coded_and_write_nothing(api, engine):
    reporter, sender, outsider = users(3)
    cid = await api.create_group(sender, [reporter])
    await api.send(sender, cid, "m")
    await api.send(reporter, cid, "mine")
    cases = [
        ({"c": cid, "s": 1, "r": "SPAM", "d": ""}, outsider, "NOT_FOUND"),  # not a member: as if no conversation
        ({"c": cid, "s": 9, "r": "SPAM", "d": ""}, reporter, "NOT_FOUND"),
        ({"c": cid, "s": 2, "r": "SPAM", "d": ""}, reporter, "BAD_USER_INPUT"),  # one's own message
        ({"c": cid, "s": -1, "r": "SPAM", "d": ""}, reporter, "BAD_USER_INPUT"),
        ({"c": cid, "s": 1, "r": "SPAM", "d": "x" * 2001}, reporter, "BAD_USER_INPUT"),
        ({"c": cid, "s": 1, "r": "NOT_A_REASON", "d": ""}, reporter, "BAD_USER_INPUT"),
        ({"c": cid, "s": 1, "r": "SPAM", "d": ""}, None, "UNAUTHENTICATED"),
    ]
    for variables, user, code in cases:
        assert error_code(await api.error(REPORT_MESSAGE, variables, user=user)) == code, (variables, user)
    await api.data(DELETE, {"c": cid, "s": 1}, user=sender)
    error = await api.error(REPORT_MESSAGE, {"c": cid, "s": 1, "r": "SPAM", "d": ""}, user=reporter)
    assert error_code(error) == "CONFLICT" and error["extensions"]["reason"] == "MESSAGE_DELETED"
    assert error_code(await api.error(REPORT_USER, {"u": reporter, "r": "SPAM"}, user=reporter)) == "BAD_USER_INPUT"
    async with engine.connect() as conn:
        count = (
            await conn.execute(
                text("SELECT count(*) FROM report WHERE reporter_id IN (:a, :b)"), {"a": reporter, "b": outsider}
            )
        ).scalar()
    assert count == 0


async def test_reporting_a_user_is_idempotent_even_when_raced(api, engine):
    reporter, reported = users(2)
    answers = await asyncio.gather(
        *(api.data(REPORT_USER, {"u": reported, "r": "IMPERSONATION"}, user=reporter) for _ in range(8))
    )
    ids = {a["reportUser"]["reportId"] for a in answers}
    assert len(ids) == 1
    assert sorted(a["reportUser"]["duplicate"] for a in answers) == [False] + [True] * 7
    async with engine.connect() as conn:
        count = (
            await conn.execute(text("SELECT count(*) FROM report WHERE reporter_id = :a"), {"a": reporter})
        ).scalar()
    assert count == 1


async def test_the_reported_user_sees_nothing_of_the_report(api):
    """No field or event of the API carries a report to anyone: the reported user's view of the message
    and the conversation is the same before and after."""
    reporter, sender = users(2)
    cid = await api.create_group(sender, [reporter])
    await api.send(sender, cid, "m")
    query = "query($c: ID!) { conversation(id: $c) { lastSeq lastChangeSeq } messages(conversationId: $c, first: 5) { nodes { body editedAt } } }"
    before = await api.data(query, {"c": cid}, user=sender)
    await api.data(REPORT_MESSAGE, {"c": cid, "s": 1, "r": "SPAM", "d": "spam"}, user=reporter)
    assert await api.data(query, {"c": cid}, user=sender) == before


async def test_reports_and_blocks_are_rate_limited_per_user_and_a_refusal_writes_nothing(migrated_url, http, engine):
    """With the default limits (0.5 blocks and 0.2 reports a second; the other tests' servers turn them off)."""
    defaults = make_settings(migrated_url, rate_block_per_second=0.5, rate_report_per_second=0.2)
    async with RunningServer(defaults) as server:
        api = ChatApi.of(server, http)
        await _rate_limited_reports_and_blocks(api, engine, server)


async def _rate_limited_reports_and_blocks(api, engine, server) -> None:
    reporter, *others = users(1 + 2 * server.settings.rate_report_burst)
    answers = [await api.execute(REPORT_USER, {"u": other, "r": "SPAM"}, user=reporter) for other in others]
    limited = [a["errors"][0]["extensions"] for a in answers if "errors" in a]
    assert limited and all(e["code"] == "LIMIT_EXCEEDED" and e["reason"] == "RATE_LIMITED" for e in limited)
    async with engine.connect() as conn:
        count = (
            await conn.execute(text("SELECT count(*) FROM report WHERE reporter_id = :a"), {"a": reporter})
        ).scalar()
    assert count == len(answers) - len(limited)
    blocker = reporter + "-b"
    block = "mutation($u: ID!) { blockUser(userId: $u) { changed } }"
    blocked = [
        await api.execute(block, {"u": f"{blocker}-{i}"}, user=blocker)
        for i in range(2 * server.settings.rate_block_burst)
    ]
    assert any("errors" in b and b["errors"][0]["extensions"]["reason"] == "RATE_LIMITED" for b in blocked)
