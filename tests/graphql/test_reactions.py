"""Reactions: idempotent per (message, user, emoji), an aggregate read from counts kept on write, who
reacted paginated, limits with coded errors, never unread; each change takes a change seq (REACTION) and
reaches messageChanged. Against the session's chatgql and its PostgreSQL."""

from __future__ import annotations

from sqlalchemy import text

from ..conftest import error_code
from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

ADD = """
mutation($c: ID!, $s: Long!, $e: String!) {
  addReaction(conversationId: $c, seq: $s, emoji: $e) { changeSeq message { id reactions { emoji count reactedByViewer } } }
}
"""
REMOVE = """
mutation($c: ID!, $s: Long!, $e: String!) {
  removeReaction(conversationId: $c, seq: $s, emoji: $e) { changeSeq message { reactions { emoji count } } }
}
"""
REACTIONS = """
query($c: ID!, $e: String!, $after: ID) {
  messages(conversationId: $c, first: 1) {
    nodes { reactions { emoji count reactedByViewer } reactedBy(emoji: $e, first: 2, after: $after) }
  }
  conversation(id: $c) { lastSeq lastChangeSeq unreadCount }
}
"""


async def add(api: ChatApi, user: int, cid: str, emoji: str, seq: int = 1) -> dict:
    return (await api.data(ADD, {"c": cid, "s": seq, "e": emoji}, user=user))["addReaction"]


async def test_reactions_are_idempotent_aggregated_and_paged_and_never_unread(api):
    cid = await api.create_group(1, [2, 3, 4])
    await api.send(1, cid, "react to me")
    before = (await api.data(REACTIONS, {"c": cid, "e": "👍"}, user=2))["conversation"]
    first = await add(api, 2, cid, "👍")
    assert first["changeSeq"] == 1
    assert first["message"]["reactions"] == [{"emoji": "👍", "count": 1, "reactedByViewer": True}]
    again = await add(api, 2, cid, "👍")
    assert again["changeSeq"] is None  # idempotent: nothing written
    await add(api, 3, cid, "👍")
    await add(api, 4, cid, "👍")
    await add(api, 3, cid, "🎉")
    data = await api.data(REACTIONS, {"c": cid, "e": "👍"}, user=4)
    node = data["messages"]["nodes"][0]
    assert node["reactions"] == [
        {"emoji": "👍", "count": 3, "reactedByViewer": True},
        {"emoji": "🎉", "count": 1, "reactedByViewer": False},
    ]
    assert node["reactedBy"] == ["2", "3"]
    page2 = await api.data(REACTIONS, {"c": cid, "e": "👍", "after": "3"}, user=4)
    assert page2["messages"]["nodes"][0]["reactedBy"] == ["4"]
    conv = data["conversation"]
    assert conv["lastSeq"] == before["lastSeq"] == 1 and conv["lastChangeSeq"] == 4  # never a message seq
    assert (await api.data(REACTIONS, {"c": cid, "e": "👍"}, user=2))["conversation"]["unreadCount"] == before[
        "unreadCount"
    ]
    removed = (await api.data(REMOVE, {"c": cid, "s": 1, "e": "🎉"}, user=3))["removeReaction"]
    assert removed["changeSeq"] == 5 and removed["message"]["reactions"] == [{"emoji": "👍", "count": 3}]
    nothing = (await api.data(REMOVE, {"c": cid, "s": 1, "e": "🎉"}, user=3))["removeReaction"]
    assert nothing["changeSeq"] is None


async def test_reaction_limits_and_tombstones_are_coded_errors_and_a_delete_erases_reactions(api, engine, server):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "m")
    limit = server.settings.max_reactions_per_message
    for i in range(limit):
        await add(api, 2, cid, f"e{i}")
    error = await api.error(ADD, {"c": cid, "s": 1, "e": "one-too-many"}, user=1)
    assert error_code(error) == "LIMIT_EXCEEDED" and error["extensions"]["reason"] == "REACTIONS_PER_MESSAGE"
    assert (await add(api, 1, cid, "e0"))["changeSeq"] is not None  # an emoji already there is fine
    long = "x" * (server.settings.max_emoji_chars + 1)
    assert error_code(await api.error(ADD, {"c": cid, "s": 1, "e": long}, user=1)) == "BAD_USER_INPUT"
    assert error_code(await api.error(ADD, {"c": cid, "s": 1, "e": " "}, user=1)) == "BAD_USER_INPUT"
    assert error_code(await api.error(ADD, {"c": cid, "s": 7, "e": "a"}, user=1)) == "NOT_FOUND"
    assert error_code(await api.error(ADD, {"c": cid, "s": 1, "e": "a"}, user=9)) == "NOT_FOUND"
    await api.data("mutation($c: ID!) { deleteMessage(conversationId: $c, seq: 1) { changeSeq } }", {"c": cid}, user=1)
    error = await api.error(ADD, {"c": cid, "s": 1, "e": "a"}, user=2)
    assert error_code(error) == "CONFLICT" and error["extensions"]["reason"] == "MESSAGE_DELETED"
    async with engine.connect() as conn:
        for table in ("message_reaction", "message_reaction_count"):
            assert (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar() == 0  # erased


async def test_a_reaction_reaches_messagechanged_with_the_message_and_the_viewers_own_aggregate(server, api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "m")
    query = """subscription($c: ID) { messageChanged(conversationId: $c) {
        changeSeq kind seq changedBy message { id reactions { emoji count reactedByViewer } } } }"""
    async with await ws_connect(server, 2) as ws:
        op = await ws.subscribe(query, {"c": cid})
        await wait_active_subscriptions(server, 1)
        await add(api, 1, cid, "❤️")
        event = (await op.next())["messageChanged"]
    assert (event["changeSeq"], event["kind"], event["seq"], event["changedBy"]) == (1, "REACTION", 1, "1")
    assert event["message"]["reactions"] == [{"emoji": "❤️", "count": 1, "reactedByViewer": False}]
