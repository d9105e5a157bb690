"""Exactness of the read state: counts compared with a model after random operation sequences
(hypothesis), and the races the model cannot show (many tasks, two devices per user).

The model is what the API promises, written plainly: per member a public watermark (what others
see) and an own read position (markUnread rewinds it, markRead raises both), a delivered mark (read
implies delivered), mute and archive; unread = lastSeq - own, totals over the unmuted, mentions
unread above own, seenByCount / deliveredCount from the others' public marks.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from tests.support.live import ChatApi

from ..graphql.test_fuzz import SETTINGS

SEND = """
mutation($c: ID!, $m: UUID!, $mentions: [ID!]) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: "b", mentions: $mentions) { message { seq } } }
"""
UNREAD = "mutation($c: ID!, $s: Long!) { markUnread(conversationId: $c, fromSeq: $s) { id } }"
DELIVER = "mutation($c: ID!, $s: Long!) { markDelivered(conversationId: $c, seq: $s) { advanced } }"
UPDATE = "mutation($c: ID!, $mu: Boolean, $ar: Boolean) { updateMembership(conversationId: $c, muted: $mu, archived: $ar) { id } }"
STATE = """
query($a: ID!, $b: ID!) {
  a: conversation(id: $a) { ...c }  b: conversation(id: $b) { ...c }
  viewer { totalUnread unreadConversations totalUnreadMentions }
  inbox(first: 10) { nodes { id } }
}
fragment c on Conversation { lastSeq unreadCount unreadMentions archived muted
                             lastMessage { seenByCount deliveredCount } }
"""
_users = itertools.count(100, 3)


@dataclass
class Mark:
    public: int = 0
    own: int = 0
    delivered: int = 0
    muted: bool = False
    archived_at: int | None = None


@dataclass
class Conv:
    id: str
    last_seq: int = 0
    senders: dict[int, int] = field(default_factory=dict)  # seq -> sender index
    mentions: dict[int, set[int]] = field(default_factory=dict)  # seq -> member indexes
    marks: list[Mark] = field(default_factory=lambda: [Mark(), Mark(), Mark()])


OPS = st.one_of(
    st.tuples(st.just("send"), st.integers(0, 2), st.integers(0, 1), st.sets(st.integers(0, 2), max_size=2)),
    st.tuples(st.just("read"), st.integers(0, 2), st.integers(0, 1), st.integers(0, 7)),
    st.tuples(st.just("unread"), st.integers(0, 2), st.integers(0, 1), st.integers(1, 6)),
    st.tuples(st.just("deliver"), st.integers(0, 2), st.integers(0, 1), st.integers(0, 7)),
    st.tuples(st.just("mute"), st.integers(0, 2), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("archive"), st.integers(0, 2), st.integers(0, 1), st.booleans()),
)


async def apply(api: ChatApi, users: list[int], conv: Conv, op: tuple) -> None:
    """The operation through the API, and the same on the model."""
    kind, who, _, arg = op
    user, mark = users[who], conv.marks[who]
    if kind == "send":
        mentioned = sorted(arg)
        await api.data(
            SEND, {"c": conv.id, "m": str(uuid.uuid4()), "mentions": [str(users[i]) for i in mentioned]}, user=user
        )
        conv.last_seq += 1
        conv.senders[conv.last_seq] = who
        conv.mentions[conv.last_seq] = set(mentioned)
        mark.public = mark.own = conv.last_seq  # the sender has read everything up to their message
    elif kind == "read":
        await api.mark_read(user, conv.id, arg)
        target = min(arg, conv.last_seq)
        mark.public, mark.own = max(mark.public, target), max(mark.own, target)
    elif kind == "unread":
        body = await api.execute(UNREAD, {"c": conv.id, "s": arg}, user=user)
        if arg > conv.last_seq:
            assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        else:
            assert "errors" not in body, body
            mark.own = min(mark.own, arg - 1)
    elif kind == "deliver":
        await api.data(DELIVER, {"c": conv.id, "s": arg}, user=user)
        mark.delivered = max(mark.delivered, min(arg, conv.last_seq))
    elif kind == "mute":
        await api.data(UPDATE, {"c": conv.id, "mu": arg}, user=user)
        mark.muted = arg
    else:
        await api.data(UPDATE, {"c": conv.id, "ar": arg}, user=user)
        mark.archived_at = conv.last_seq if arg else None


def expected(convs: list[Conv], who: int) -> dict:
    def one(conv: Conv) -> dict:
        mark = conv.marks[who]
        last = conv.last_seq
        sender = conv.senders.get(last)
        others = [m for i, m in enumerate(conv.marks) if i != sender]
        return {
            "lastSeq": last,
            "unreadCount": last - mark.own,
            "unreadMentions": sum(1 for seq, names in conv.mentions.items() if seq > mark.own and who in names),
            "archived": mark.archived_at is not None and last <= mark.archived_at,
            "muted": mark.muted,
            "lastMessage": None
            if last == 0
            else {
                "seenByCount": sum(m.public >= last for m in others),
                "deliveredCount": sum(max(m.delivered, m.public) >= last for m in others),
            },
        }

    a, b = one(convs[0]), one(convs[1])
    unmuted = [c for c in (a, b) if not c["muted"]]
    inbox = [c for c, shown in zip(convs, (a, b), strict=True) if not shown["archived"]]
    return {
        "a": a,
        "b": b,
        "viewer": {
            "totalUnread": sum(c["unreadCount"] for c in unmuted),
            "unreadConversations": sum(c["unreadCount"] > 0 for c in unmuted),
            "totalUnreadMentions": a["unreadMentions"] + b["unreadMentions"],
        },
        "inbox": sorted(c.id for c in inbox),
    }


@settings(max_examples=40, **SETTINGS)
@given(ops=st.lists(OPS, min_size=1, max_size=14))
async def test_counts_match_the_model_after_random_operations(server, http, ops):
    api = ChatApi.of(server, http)
    base = next(_users)
    users = [base, base + 1, base + 2]
    convs = [Conv(await api.create_group(users[0], users[1:])) for _ in range(2)]
    for op in ops:
        await apply(api, users, convs[op[2]], op)
    for who, user in enumerate(users):
        got = await api.data(STATE, {"a": convs[0].id, "b": convs[1].id}, user=user)
        got["inbox"] = sorted(node["id"] for node in got["inbox"]["nodes"])
        assert got == expected(convs, who), (who, ops)


async def test_mute_racing_new_messages_leaves_totals_exact(server, http):
    """Sends from two senders and mute/unmute from two devices of the reader, at once: afterwards the
    totals are the unmuted conversations' unread, whatever the order was."""
    api = ChatApi.of(server, http)
    a, b = await api.create_group(1, [2, 3]), await api.create_group(1, [2, 3])
    for round_ in range(6):
        sends = [api.send(sender, cid) for sender in (1, 3) for cid in (a, b) for _ in range(3)]
        toggles = [api.data(UPDATE, {"c": cid, "mu": (round_ + i) % 2 == 0}, user=2) for i, cid in enumerate((a, a, b))]
        await asyncio.gather(*sends, *toggles)
        state = await api.data(STATE, {"a": a, "b": b}, user=2)
        unmuted = [state[k] for k in ("a", "b") if not state[k]["muted"]]
        assert state["viewer"]["totalUnread"] == sum(c["unreadCount"] for c in unmuted)
        assert state["viewer"]["unreadConversations"] == sum(c["unreadCount"] > 0 for c in unmuted)
        assert state["a"]["unreadCount"] == state["a"]["lastSeq"]  # 2 never read: mute changes no count


async def test_archive_racing_new_messages_never_hides_a_message_the_archive_did_not_cover(server, http, engine):
    api = ChatApi.of(server, http)
    for _ in range(8):
        cid = await api.create_group(1, [2])
        await api.send(1, cid)
        await asyncio.gather(
            *(api.send(1, cid) for _ in range(4)),
            api.data(UPDATE, {"c": cid, "ar": True}, user=2),
            api.data(UPDATE, {"c": cid, "ar": True}, user=2),  # a second device
        )
        async with engine.connect() as conn:
            archived_seq, last_seq = (
                await conn.execute(
                    text(
                        "SELECT m.archived_seq, c.last_seq FROM conversation_member m JOIN conversation c"
                        " ON c.id = m.conversation_id WHERE m.conversation_id = :c AND m.user_id = '2'"
                    ),
                    {"c": int(cid)},
                )
            ).one()
        shown = cid in [
            n["id"] for n in (await api.data("{ inbox(first: 50) { nodes { id } } }", user=2))["inbox"]["nodes"]
        ]
        assert 1 <= archived_seq <= last_seq == 5
        assert shown == (last_seq > archived_seq)  # hidden only when no message came after the archive
