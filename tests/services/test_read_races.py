"""Read-path integrity under races.

(a) markRead storms from several devices of one user: the watermark ends at
    min(max seq sent, lastSeq), no answer ever reports more than that, and the
    read.updated outbox rows go strictly up in outbox order, one per answer
    that said advanced=true (and with the same values).
(b) membership churn (addMembers / removeMember / leaving) racing sends and
    markReads: memberCount is the number of member rows, every member's
    unreadCount is lastSeq - lastReadSeq, seenByCount / seenBy / seen agree
    with the watermarks recomputed from the database, no watermark passes
    lastSeq, seqs stay gap-free, and a group never holds more than 1,000.

Everything runs against a relay-less chatgql on a database of its own: the
outbox keeps every row (the session server's relay would drain a shared one).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from chatgql.edge.auth import issue_token

from ..conftest import GraphQLClient
from ..support.writepath import Quiet, gated, open_quiet_server, quiet, wave  # noqa: F401 (quiet: a fixture)

MARK_READ = (
    "mutation($c: ID!, $s: Long!) "
    "{ markRead(conversationId: $c, seq: $s) { conversationId lastReadSeq advanced unreadCount } }"
)
SEND = (
    "mutation($c: ID!, $k: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $k, body: $b) { message { seq } } }"
)
CREATE_GROUP = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id memberCount } }"
ADD = "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { memberCount } }"
REMOVE = "mutation($c: ID!, $u: ID!) { removeMember(conversationId: $c, userId: $u) { userId } }"
MINE = "query($c: ID!) { conversation(id: $c) { lastSeq lastReadSeq unreadCount memberCount } }"
ROSTER = "query($c: ID!) { conversation(id: $c) { lastSeq memberCount members { userId role lastReadSeq } } }"
PAGE = (
    "query($c: ID!, $a: String, $n: Int) { messages(conversationId: $c, first: 200, after: $a) "
    "{ nodes { seq senderId seenByCount seenBy(first: $n) seen } pageInfo { hasNextPage endCursor } } }"
)

MAX_MEMBERS = 1000


# ------------------------------------------------------------------ a relay-less server on a database of its own


@pytest.fixture(scope="module")
async def quiet_server(migrated_url: str) -> AsyncIterator[Quiet]:
    async with open_quiet_server(migrated_url, "read_races") as running:
        yield running


@pytest.fixture
async def races(quiet: Quiet) -> Quiet:
    """The relay-less server, emptied, with a client of this test's own (tests/support/writepath.py)."""
    return quiet


async def create_group(client: GraphQLClient, owner: int, members: list[int]) -> str:
    data = await client.data(CREATE_GROUP, {"t": "races", "m": [str(m) for m in members]}, user=owner)
    return data["createGroup"]["id"]


async def fill(client: GraphQLClient, cid: str, count: int, sender: int) -> None:
    for i in range(count):
        await client.data(SEND, {"c": cid, "k": str(uuid.uuid4()), "b": f"m{i}"}, user=sender)


async def scalar(engine: AsyncEngine, sql: str, **params: Any) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one_or_none()


async def read_events(engine: AsyncEngine, cid: str, user: int, after_id: int) -> list[int]:
    """lastReadSeq of the read.updated rows of (cid, user) written after outbox id after_id, in id order."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT payload FROM outbox WHERE id > :after AND msg_key = :key "
                "AND payload->>'type' = 'read.updated' AND payload->>'userId' = :uid ORDER BY id"
            ),
            {"after": after_id, "key": cid, "uid": str(user)},
        )
        return [row.payload["lastReadSeq"] for row in rows]


# ------------------------------------------------------------------ (a) markRead storms


def device_tokens(settings: Any, user: int, devices: int) -> list[str]:
    """Distinct valid tokens of one user, one per device (they differ by expiry)."""
    tokens = [issue_token(settings, str(user), ttl_seconds=3600 * (d + 1)) for d in range(devices)]
    assert len(set(tokens)) == devices
    return tokens


async def storm(races: Quiet, cid: str, user: int, calls: list[tuple[int, int]], devices: int) -> list[dict]:
    """markRead(seq) for every (device, seq) at once, each from that device's token; answers in call order."""
    tokens = device_tokens(races.server.settings, user, devices)
    async with wave(races.server) as burst:

        async def one(device: int, seq: int) -> dict:
            body = await burst.execute(
                MARK_READ, {"c": cid, "s": seq}, headers={"authorization": f"Bearer {tokens[device]}"}
            )
            assert "errors" not in body, body["errors"]
            return body["data"]["markRead"]

        return await gated(races.engine, "conversation_member", [one(d, s) for d, s in calls])


def storm_calls(seed: int, devices: int, per_device: int, high: int) -> list[tuple[int, int]]:
    """devices × per_device (device, random seq in 0..high), shuffled."""
    rng = random.Random(seed)
    calls = [(d, rng.randint(0, high)) for d in range(devices) for _ in range(per_device)]
    rng.shuffle(calls)
    return calls


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_mark_read_storm_5_devices_x_40_ends_at_min_of_max_seq_and_last_seq_with_one_increasing_event_per_advance(
    races, seed
):
    reader, sender, last_seq = 2, 1, 60
    cid = await create_group(races.client, sender, [reader])
    await fill(races.client, cid, last_seq, sender)
    before = await scalar(races.engine, "SELECT coalesce(max(id), 0) FROM outbox")
    calls = storm_calls(seed, devices=5, per_device=40, high=80)
    final = min(max(seq for _, seq in calls), last_seq)

    answers = await storm(races, cid, reader, calls, devices=5)

    assert (
        await scalar(
            races.engine,
            "SELECT last_read_seq FROM conversation_member WHERE conversation_id = :c AND user_id = :u",
            c=int(cid),
            u=str(reader),
        )
        == final
    )
    # No answer ever shows more than where the watermark ends, nor less than its own clamped seq.
    assert max(a["lastReadSeq"] for a in answers) == final
    for answer, (_, seq) in zip(answers, calls, strict=True):
        assert min(seq, last_seq) <= answer["lastReadSeq"] <= final, (seq, answer)
        assert answer["unreadCount"] == last_seq - answer["lastReadSeq"]
        assert answer["conversationId"] == cid
    advanced = [a["lastReadSeq"] for a in answers if a["advanced"]]
    assert len(advanced) == len(set(advanced)), f"two calls claim the same advance: {sorted(advanced)}"
    # read.updated: strictly increasing in outbox order, exactly one per advanced answer, same values.
    events = await read_events(races.engine, cid, reader, before)
    assert all(a < b for a, b in pairwise(events)), events
    assert len(events) == len(advanced)
    assert events == sorted(advanced)
    assert events[-1] == final
    mine = (await races.client.data(MINE, {"c": cid}, user=reader))["conversation"]
    assert mine == {"lastSeq": last_seq, "lastReadSeq": final, "unreadCount": last_seq - final, "memberCount": 2}


async def test_mark_read_storm_while_messages_arrive_never_passes_last_seq_and_events_match_the_advances(races):
    reader, sender = 2, 1
    cid = await create_group(races.client, sender, [reader])
    await fill(races.client, cid, 20, sender)
    before = await scalar(races.engine, "SELECT coalesce(max(id), 0) FROM outbox")
    calls = storm_calls(11, devices=5, per_device=40, high=70)

    async with wave(races.server) as senders:

        async def send_more() -> None:
            for i in range(40):
                await senders.data(SEND, {"c": cid, "k": str(uuid.uuid4()), "b": f"late {i}"}, user=sender)

        sending = asyncio.ensure_future(send_more())
        answers = await storm(races, cid, reader, calls, devices=5)
        await sending

    watermark = await scalar(
        races.engine,
        "SELECT last_read_seq FROM conversation_member WHERE conversation_id = :c AND user_id = :u",
        c=int(cid),
        u=str(reader),
    )
    last_seq = await scalar(races.engine, "SELECT last_seq FROM conversation WHERE id = :c", c=int(cid))
    assert last_seq == 60
    assert watermark == max(a["lastReadSeq"] for a in answers) <= max(seq for _, seq in calls)
    assert watermark <= last_seq
    for answer, (_, seq) in zip(answers, calls, strict=True):
        assert answer["lastReadSeq"] <= watermark and answer["unreadCount"] >= 0, answer
        assert answer["lastReadSeq"] >= min(seq, 20), (seq, answer)  # lastSeq was at least 20 throughout
    advanced = [a["lastReadSeq"] for a in answers if a["advanced"]]
    events = await read_events(races.engine, cid, reader, before)
    assert all(a < b for a, b in pairwise(events)), events
    assert events == sorted(advanced) and len(events) == len(advanced)
    assert events[-1] == watermark


# ------------------------------------------------------------------ (b) membership churn racing sends and reads


@dataclass
class Churn:
    codes: Counter
    done: Counter
    member_counts_seen: list[int]


async def churn(
    races: Quiet,
    cid: str,
    *,
    owner: int,
    keeper: int,
    originals: list[int],
    pool: list[int],
    seed: int,
    rounds: int,
    batch: int,
    allowed: set[str],
) -> Churn:
    """Adders, removers, leavers, senders and readers, all at once, through their own connections.

    owner and keeper are never removed (they add and send throughout); originals
    and pool users come and go. Refusals whose code is in `allowed` are counted;
    any other error fails.
    """
    rng = random.Random(seed)
    codes: Counter = Counter()
    done: Counter = Counter()
    counts: list[int] = []
    removable = originals + pool

    async with wave(races.server) as api:

        async def call(kind: str, document: str, variables: dict, user: int) -> dict | None:
            body = await api.execute(document, variables, user=user)
            if body.get("errors"):
                assert len(body["errors"]) == 1, body
                code = body["errors"][0]["extensions"]["code"]
                assert code in allowed, (kind, user, variables, body)
                codes[(kind, code)] += 1
                return None
            done[kind] += 1
            return body["data"]

        async def adder() -> None:
            for _ in range(rounds):
                users = rng.sample(pool, rng.randint(1, batch))
                data = await call("add", ADD, {"c": cid, "u": [str(u) for u in users]}, rng.choice([owner, keeper]))
                if data is not None:
                    counts.append(data["addMembers"]["memberCount"])

        async def remover() -> None:
            for _ in range(rounds):
                await call("remove", REMOVE, {"c": cid, "u": str(rng.choice(removable))}, owner)

        async def leaver() -> None:
            for _ in range(rounds):
                user = rng.choice(removable)
                await call("leave", REMOVE, {"c": cid, "u": str(user)}, user)

        async def sender() -> None:
            for i in range(rounds):
                user = rng.choice([owner, keeper, *rng.sample(removable, 2)])
                await call("send", SEND, {"c": cid, "k": str(uuid.uuid4()), "b": f"churn {i}"}, user)

        async def reader() -> None:
            for _ in range(rounds):
                user = rng.choice([keeper, *removable])
                await call("read", MARK_READ, {"c": cid, "s": rng.randint(0, 3 * rounds)}, user)

        tasks = [adder] * 4 + [remover] * 2 + [leaver] * 2 + [sender] * 3 + [reader] * 3
        await asyncio.gather(*(task() for task in tasks))
    return Churn(codes, done, counts)


async def monitor_member_count(engine: AsyncEngine, cid: str, stop: asyncio.Event) -> list[int]:
    """Member row counts of cid, sampled until stop is set."""
    seen: list[int] = []
    async with engine.connect() as conn:
        while not stop.is_set():
            seen.append(
                (
                    await conn.execute(
                        text("SELECT count(*) FROM conversation_member WHERE conversation_id = :c"), {"c": int(cid)}
                    )
                ).scalar_one()
            )
            await conn.commit()
            await asyncio.sleep(0.005)
    return seen


async def db_state(engine: AsyncEngine, cid: str) -> tuple[int, dict[str, int], list[tuple[int, str]]]:
    """(last_seq, {member: last_read_seq}, [(seq, sender)]) of cid, in one snapshot."""
    async with engine.connect() as conn, conn.begin():
        await conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        last_seq = (
            await conn.execute(text("SELECT last_seq FROM conversation WHERE id = :c"), {"c": int(cid)})
        ).scalar_one()
        members = {
            row.user_id: row.last_read_seq
            for row in await conn.execute(
                text("SELECT user_id, last_read_seq FROM conversation_member WHERE conversation_id = :c"),
                {"c": int(cid)},
            )
        }
        messages = [
            (row.seq, row.sender_id)
            for row in await conn.execute(
                text("SELECT seq, sender_id FROM message WHERE conversation_id = :c ORDER BY seq"), {"c": int(cid)}
            )
        ]
    return last_seq, members, messages


async def assert_read_state_consistent(
    races: Quiet, cid: str, viewer: int, *, check_every_member: bool, seen_by_first: int
) -> dict[str, int]:
    """The invariants of (b), recomputed from the database, once everything has settled."""
    last_seq, members, messages = await db_state(races.engine, cid)
    client = races.client

    assert len(members) <= MAX_MEMBERS
    assert all(w <= last_seq for w in members.values()), {u: w for u, w in members.items() if w > last_seq}
    assert [seq for seq, _ in messages] == list(range(1, last_seq + 1)), "seqs are not gap-free"

    roster = (await client.data(ROSTER, {"c": cid}, user=viewer))["conversation"]
    assert roster["lastSeq"] == last_seq
    assert roster["memberCount"] == len(members) == len(roster["members"])
    assert {m["userId"]: m["lastReadSeq"] for m in roster["members"]} == members
    assert [m["role"] for m in roster["members"]].count("OWNER") == 1

    # Each member's own view: unreadCount == lastSeq - lastReadSeq.
    rng = random.Random(5)
    askers = sorted(members) if check_every_member else rng.sample(sorted(members), min(30, len(members)))
    views = await asyncio.gather(*(client.data(MINE, {"c": cid}, user=u) for u in askers))
    for user, view in zip(askers, views, strict=True):
        mine = view["conversation"]
        assert mine == {
            "lastSeq": last_seq,
            "lastReadSeq": members[user],
            "unreadCount": last_seq - members[user],
            "memberCount": len(members),
        }, (user, mine)

    # Seen: recomputed from the watermarks, for every message.
    got: list[dict] = []
    after = None
    while True:
        page = (await client.data(PAGE, {"c": cid, "a": after, "n": seen_by_first}, user=viewer))["messages"]
        got += page["nodes"]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert [node["seq"] for node in got] == [seq for seq, _ in messages]
    for node, (seq, sender) in zip(got, messages, strict=True):
        seen_by = sorted(u for u, w in members.items() if u != sender and w >= seq)
        others = len(members) - (sender in members)
        assert node["senderId"] == sender
        assert node["seenByCount"] == len(seen_by), (seq, node["seenByCount"], len(seen_by))
        assert node["seenBy"] == seen_by[:seen_by_first], seq  # text order
        assert node["seen"] == (others > 0 and len(seen_by) == others), (seq, node["seen"])
    return members


async def test_membership_churn_racing_sends_and_reads_keeps_member_count_unread_and_seen_consistent(races):
    owner, keeper = 1, 2
    originals = list(range(3, 23))
    pool = list(range(100, 160))
    cid = await create_group(races.client, owner, [keeper, *originals])

    result = await churn(
        races,
        cid,
        owner=owner,
        keeper=keeper,
        originals=originals,
        pool=pool,
        seed=7,
        rounds=25,
        batch=5,
        allowed={"NOT_FOUND"},
    )

    # The churn really happened: every kind of call succeeded many times.
    assert min(result.done[k] for k in ("add", "remove", "leave", "send", "read")) >= 5, result.done
    assert result.done["send"] >= 25, result.done
    members = await assert_read_state_consistent(races, cid, owner, check_every_member=True, seen_by_first=1000)
    assert str(owner) in members and str(keeper) in members


async def test_membership_churn_at_the_1000_member_limit_never_passes_1000_and_stays_consistent(races):
    owner, keeper = 1, 2
    originals = list(range(3, 981))  # 980 members to begin with
    pool = list(range(5000, 5200))
    cid = await create_group(races.client, owner, [keeper, *originals])
    stop = asyncio.Event()
    monitor = asyncio.ensure_future(monitor_member_count(races.engine, cid, stop))

    try:
        result = await churn(
            races,
            cid,
            owner=owner,
            keeper=keeper,
            originals=originals,
            pool=pool,
            seed=13,
            rounds=15,
            batch=8,
            allowed={"NOT_FOUND", "LIMIT_EXCEEDED"},
        )
    finally:
        stop.set()
        sampled = await monitor

    assert sampled and max(sampled) <= MAX_MEMBERS, max(sampled)
    assert result.member_counts_seen and max(result.member_counts_seen) <= MAX_MEMBERS
    # The limit was really reached and defended (not only approached).
    assert result.codes[("add", "LIMIT_EXCEEDED")] >= 1, result.codes
    assert max(sampled + result.member_counts_seen) >= MAX_MEMBERS - 8
    # LIMIT_EXCEEDED comes only from adding.
    assert {kind for kind, code in result.codes if code == "LIMIT_EXCEEDED"} == {"add"}, result.codes
    await assert_read_state_consistent(races, cid, owner, check_every_member=False, seen_by_first=50)
