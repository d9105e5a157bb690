"""Each event kind is defined once (events/types.py): its JSON form round-trips, the SQL that fills
fields in fills exactly the ones the definition says it does, and what reads events (the shared
subscription results) names only fields that exist."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_type_hints

import orjson
import pytest
from graphql import GraphQLObjectType, build_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strawberry.utils.str_converters import to_camel_case

from chatgql.db import Database
from chatgql.engine.shared import derive
from chatgql.events import types as events
from chatgql.events.types import DISPATCH, PRODUCER, STORE, MembersAdded, MessageNew, ReadUpdated
from chatgql.graphql.subscriptions import Subscription
from chatgql.models import MESSAGE_FIELDS
from chatgql.services.groupcommit import MESSAGE_KEYS, READ_KEYS
from chatgql.store import conversations, delivery, messages, outbox, reads

REPO = Path(__file__).resolve().parents[2]
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=50)  # JSON has no lone surrogates
IDS = st.integers(1, 2**63 - 1)
SHARABLE = derive(Subscription).sharable
_BY_TYPE: dict[Any, st.SearchStrategy] = {
    int: IDS,
    str: TEXT,
    bool: st.booleans(),
    uuid.UUID: st.uuids(),
    list[int]: st.lists(IDS, max_size=5),
}


def _strategy(hint: Any) -> st.SearchStrategy:
    args = [arg for arg in getattr(hint, "__args__", ()) if arg is not type(None)]
    if hint in _BY_TYPE:
        return _BY_TYPE[hint]
    if len(args) == 1 and args[0] in _BY_TYPE:  # `int | None`: filled in, as a subscriber gets it
        return _BY_TYPE[args[0]]
    if "datetime" in str(hint):
        return st.datetimes(timezones=st.just(UTC))
    raise AssertionError(f"no strategy for {hint}: add one")


def _kind_events(kind: type[events.Event]) -> st.SearchStrategy:
    hints = get_type_hints(kind)
    return st.builds(kind, **{wire.name: _strategy(hints[wire.name]) for wire in kind.FIELDS})


EVERY_EVENT = st.one_of(*(_kind_events(kind) for kind in events.REGISTRY.values()))


def test_the_registry_holds_every_kind_under_the_type_the_dispatcher_routes() -> None:
    assert set(events.REGISTRY) == {
        "message.new",
        "read.updated",
        "member.added",
        "member.removed",
        "message.edited",
        "message.deleted",
        "reaction.changed",
        "message.pinned",
        "message.unpinned",
        "membership.updated",
        "thread.updated",
        "draft.updated",
        "conversation.updated",
        "delivery.updated",
        "typing",  # ephemeral: never in the outbox (events/ephemeral.py)
        "block.changed",
        "user.banned",
        "user.unbanned",
        "saved.changed",
        "reminder.due",
        "presence.changed",  # ephemeral: never in the outbox (events/ephemeral.py)
    }
    # about no conversation, for one user (conversationId 0: the dispatcher routes them by userId)
    assert {"block.changed", "user.banned", "user.unbanned", "presence.changed"} == events.USER_TYPES
    # for their own member's devices only (the dispatcher routes them by userId)
    assert {
        "membership.updated",
        "saved.changed",
        "reminder.due",
        "thread.updated",
        "draft.updated",
    } == events.OWN_TYPES
    changes = ("message.edited", "message.deleted", "reaction.changed", "message.pinned", "message.unpinned")
    assert dict.fromkeys(changes, "message.changed") == events.CHANNELS
    assert (events.MESSAGE_NEW, events.READ_UPDATED, events.MEMBERS_ADDED, events.MEMBER_REMOVED) == (
        "message.new",
        "read.updated",
        "member.added",
        "member.removed",
    )


def test_the_wire_keys_are_todays() -> None:
    """Compatible with what producers wrote and subscribers read before the definitions."""
    assert MessageNew.keys(PRODUCER) == {
        "conversationId",
        "senderId",
        "clientMsgId",
        "body",
        "replyToSeq",
        "quoteConversationId",  # optional: left out of a send with no quote
        "quoteSeq",
        "forwarded",  # optional: only a forward's carries it (true)
    }
    assert MessageNew.keys(STORE) == {"seq", "createdAt"}
    assert ReadUpdated.keys(PRODUCER) == {"conversationId", "userId"}
    assert ReadUpdated.keys(STORE) == {"lastReadSeq"}
    assert ReadUpdated.keys(DISPATCH) == {"coalesced", "moves"}
    assert MembersAdded.keys(PRODUCER) == {"conversationId", "userIds"}
    assert events.MemberRemoved.keys(PRODUCER) == {"conversationId", "userId"}
    cmid = uuid.UUID("00000000-0000-4000-8000-000000000001")
    assert MessageNew(conversation_id=7, sender_id="3", client_msg_id=cmid, body="hi").outbox_row() == (
        "7",
        {
            "type": "message.new",
            "conversationId": 7,
            "senderId": "3",
            "clientMsgId": str(cmid),
            "body": "hi",
        },
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EVERY_EVENT)
def test_every_kind_round_trips_through_its_json(event: events.Event) -> None:
    wire = orjson.loads(orjson.dumps(event.to_wire()))  # what the bus carries
    assert events.parse(wire) == event
    assert type(events.parse(wire)) is type(event)
    payload = event.payload()
    assert payload["type"] == event.TYPE
    assert set(payload) == {"type"} | type(event).keys(PRODUCER)  # the producer writes its own fields only
    assert {k: v for k, v in wire.items() if k in payload} == orjson.loads(orjson.dumps(payload))
    # the rest is what the store filled in, and what the dispatcher set (when not its default)
    assert set(wire) - set(payload) <= type(event).keys(STORE) | type(event).keys(DISPATCH)
    assert set(wire) >= set(payload) | type(event).keys(STORE)
    assert event.outbox_row()[0] == str(event.conversation_id)


def test_a_subscriber_reads_a_dispatched_coalesced_read_the_way_the_dispatcher_writes_it() -> None:
    """events/dispatch.py passes a coalesced read.updated on as {**event, coalesced, moves}."""
    stored = {"type": "read.updated", "conversationId": 5, "userId": "9", "lastReadSeq": 12}
    assert events.parse(stored) == ReadUpdated(conversation_id=5, user_id="9", last_read_seq=12)
    coalesced = events.parse({**stored, "coalesced": True, "moves": 4})
    assert coalesced == ReadUpdated(conversation_id=5, user_id="9", last_read_seq=12, coalesced=True, moves=4)
    assert events.parse({**stored, "addedLater": 1}) == events.parse(stored)  # unknown keys: ignored


def test_an_event_without_a_field_its_producer_or_the_store_fills_in_is_refused() -> None:
    with pytest.raises(ValueError, match="lastReadSeq"):
        events.parse({"type": "read.updated", "conversationId": 5, "userId": "9"})
    with pytest.raises(ValueError, match="senderId"):
        events.parse({"type": "message.new", "conversationId": 5, "clientMsgId": str(uuid.uuid4()), "body": "x"})
    with pytest.raises(KeyError):
        events.parse({"type": "message.starred", "conversationId": 5})  # no such kind
    with pytest.raises(ValueError, match="message.edited event without"):  # senderId, changeSeq...
        events.parse({"type": "message.edited", "conversationId": 5, "seq": 1})


def test_a_change_event_carries_the_message_with_its_optional_fields_null() -> None:
    """Every producer field of a change is written but an unset optional one, which reads back as None."""
    cmid = uuid.UUID("00000000-0000-4000-8000-000000000002")
    at = datetime(2026, 12, 1, tzinfo=UTC)
    edited = events.MessageEdited(
        conversation_id=7, change_seq=2, seq=3, user_id="4", sender_id="4", client_msg_id=cmid, body="b", created_at=at
    )
    payload = edited.payload()
    assert "editedAt" not in payload and "deletedBy" not in payload and payload["changeSeq"] == 2
    assert events.parse(orjson.loads(orjson.dumps(payload))) == edited


# --- the fields the store fills in -----------------------------------------------------------


@pytest.fixture
async def database(migrated_url: str) -> AsyncIterator[Database]:
    database = await Database(migrated_url, max_size=2).open()
    try:
        yield database
    finally:
        await database.close()


async def test_every_statement_that_writes_an_event_writes_what_its_definition_parses(database: Database) -> None:
    """chat_send, chat_send_batch, the markRead statement and its coalesced form, and membership
    events, run for real (in a transaction rolled back at the end: no relay sees them): every
    outbox payload has exactly its definition's producer and store keys, and parses."""
    rows: list = []
    with pytest.raises(_RolledBack):
        async with database.connection() as conn, conn.transaction():
            group = (await conversations.insert_conversation(conn, "GROUP", "t", created_by="1")).id
            added = await conversations.insert_members(conn, group, [("1", "OWNER"), ("2", "MEMBER"), ("3", "MEMBER")])
            await outbox.append(conn, [MembersAdded(conversation_id=group, user_ids=added).outbox_row()])

            def send_item(sender: str, body: str) -> tuple[str, uuid.UUID, str, dict, dict]:
                cmid = uuid.uuid4()
                new = MessageNew(conversation_id=group, sender_id=sender, client_msg_id=cmid, body=body)
                return sender, cmid, body, new.payload(), ReadUpdated(conversation_id=group, user_id=sender).payload()

            _, cmid, body, new, read = send_item("2", "first")
            row = await messages.send(
                conn,
                conversation_id=group,
                sender_id="2",
                client_msg_id=cmid,
                body=body,
                message_event=new,
                read_event=read,
                message_keys=MESSAGE_KEYS,
                read_keys=READ_KEYS,
            )
            assert row.outcome == "stored"
            batch = [send_item("1", "a"), send_item("3", "b"), send_item("1", "c")]
            stored = await messages.send_batch(conn, group, batch, MESSAGE_KEYS, READ_KEYS)
            assert [r.outcome for r in stored] == ["stored"] * 3
            read = ReadUpdated(conversation_id=group, user_id="2").payload()
            assert await reads.advance_watermark(conn, group, "2", 3, read, READ_KEYS) is not None
            payloads = [ReadUpdated(conversation_id=group, user_id=uid).payload() for uid in ("2", "3")]
            moved = await reads.advance_watermarks(conn, [group, group], ["2", "3"], [4, 4], payloads, READ_KEYS)
            assert len(moved) == 2
            await outbox.append(conn, [events.MemberRemoved(conversation_id=group, user_id="3").outbox_row()])
            rows = await conn.fetch("SELECT msg_key, payload FROM outbox WHERE msg_key = $1 ORDER BY id", str(group))
            raise _RolledBack  # nothing of this commits

    for row in rows:
        payload = row["payload"]
        kind = events.REGISTRY[payload["type"]]
        optional = {key for _, key, _, left_out_when_none in kind._PRODUCED if left_out_when_none}
        assert {"type"} | kind.keys(PRODUCER) | kind.keys(STORE) >= set(payload), payload
        assert set(payload) >= {"type"} | (kind.keys(PRODUCER) - optional) | kind.keys(STORE), payload
        event = events.parse(payload)
        assert event.to_wire().keys() == payload.keys()
        assert events.parse(orjson.loads(orjson.dumps(event.to_wire()))) == event
        assert row["msg_key"] == str(event.conversation_id)
    summary = []
    for event in (events.parse(row["payload"]) for row in rows):
        if isinstance(event, MessageNew):
            summary.append(("new", event.sender_id, event.seq))
        elif isinstance(event, ReadUpdated):
            summary.append(("read", event.user_id, event.last_read_seq))
        else:
            summary.append((event.TYPE, event.conversation_id == group))
    assert summary == [
        ("member.added", True),
        ("new", "2", 1),  # chat_send; nothing of others' unread: no read.updated
        ("new", "1", 2),  # chat_send_batch: each send marks what others wrote before as read
        ("read", "1", 2),
        ("new", "3", 3),
        ("read", "3", 3),
        ("new", "1", 4),
        ("read", "1", 4),
        ("read", "2", 3),  # the markRead statement
        ("read", "2", 4),  # its coalesced form
        ("read", "3", 4),
        ("member.removed", True),
    ]


class _RolledBack(Exception):
    pass


async def test_the_statements_fill_in_the_keys_they_are_given_and_name_none_of_their_own(database: Database) -> None:
    """chat_send, chat_send_batch, the watermark statements and markDelivered's take the keys of the fields
    they fill in from the caller (Event.store_keys()): given other keys, they write those."""
    with pytest.raises(_RolledBack):
        async with database.connection() as conn, conn.transaction():
            group = (await conversations.insert_conversation(conn, "GROUP", "t", created_by="1")).id
            await conversations.insert_members(conn, group, [("1", "OWNER"), ("2", "MEMBER"), ("3", "MEMBER")])
            first = ["s1", "t1"], ["r1"]
            await messages.send(
                conn,
                conversation_id=group,
                sender_id="2",
                client_msg_id=uuid.uuid4(),
                body="x",
                message_event={"k": 1},
                read_event={"k": 2},
                message_keys=first[0],
                read_keys=first[1],
            )
            items = [("1", uuid.uuid4(), "y", {"k": 3}, {"k": 4}), ("2", uuid.uuid4(), "z", {"k": 5}, {"k": 6})]
            await messages.send_batch(conn, group, items, ["s2", "t2"], ["r2"])
            await delivery.advance_delivered(conn, "1", [group], [3], [{"k": 9}], 1000, ["d"])
            await reads.advance_watermark(conn, group, "1", 3, {"k": 7}, ["w"])
            await reads.advance_watermarks(conn, [group], ["3"], [3], [{"k": 8}], ["ws"])
            rows = await conn.fetch("SELECT payload FROM outbox WHERE msg_key = $1 ORDER BY id", str(group))
            found = [{key for key in row["payload"] if key != "k"} for row in rows]
            raise _RolledBack
    # the batch's second send marks the first one's message read: a read.updated after each of its sends
    assert found == [{"s1", "t1"}, {"s2", "t2"}, {"r2"}, {"s2", "t2"}, {"r2"}, {"d"}, {"w"}, {"ws"}], found


# --- what reads events -------------------------------------------------------------------------


def test_every_field_shared_results_take_from_an_event_is_a_field_of_the_schema() -> None:
    """engine/shared.py derives its sharable fields from the definitions' wire keys: renaming a wire
    key must not silently name a GraphQL field that does not exist (or another one)."""
    schema = build_schema((REPO / "schema.graphql").read_text())
    for type_name, names in SHARABLE.items():
        graphql_type = schema.get_type(type_name)
        assert isinstance(graphql_type, GraphQLObjectType), type_name
        missing = set(names) - set(graphql_type.fields)
        assert not missing, (type_name, missing)


def test_what_shared_results_share_follows_the_types() -> None:
    """SHARABLE is derived (engine/shared.py): every field of the message record that Message shows is
    sharable by being a plain field, a resolver only when marked PER_EVENT (seen is, conversation is not)."""
    private = {"replyToSeq", "quoteConversationId", "quoteSeq"}
    assert {to_camel_case(name) for name in MESSAGE_FIELDS} - private <= SHARABLE["Message"]
    assert {"id", "seen", "seenByCount", "seenBy"} <= SHARABLE["Message"]
    assert (
        not {"replyTo", "reactions", "attachments", "delivered", "quote"} & SHARABLE["Message"]
    )  # per viewer, or loaded
    assert "conversation" not in SHARABLE["MessageNewEvent"]
    assert SHARABLE["Member"] == {"id", "userId", "lastReadSeq"}  # role and joinedAt: loaded
