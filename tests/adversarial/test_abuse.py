"""Putting other people into conversations: rate limits, the daily group cap, the policy hook.

Every refusal is a coded GraphQL error that wrote nothing: no conversation,
no member (the outbox is not counted: the relay empties it as it goes).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

import chatgql.graphql.schema  # noqa: F401 (imports every feature module: their declare_limits)
from chatgql.edge.ratelimit import OPERATION_LIMITS, Limiters, declare_limits
from chatgql.errors import Forbidden
from chatgql.services.policy import ALLOW_ALL, MembershipRequest, load_policy

from ..conftest import GraphQLClient, RunningServer, error_code, make_settings
from .conftest import SECRET, Bystander, ServeProcess, serve_process

CREATE_GROUP = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id memberCount } }"
CREATE_DIRECT = "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }"
ADD_MEMBERS = "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id memberCount } }"


async def _counts(engine: AsyncEngine) -> tuple[int, int]:
    """(conversations, memberships)."""
    async with engine.connect() as conn:
        query = "SELECT (SELECT count(*) FROM conversation), (SELECT count(*) FROM conversation_member)"
        row = (await conn.execute(text(query))).one()
    return tuple(row)  # type: ignore[return-value]


def _rate_limited(error: dict, *, at_most: float) -> float:
    assert error_code(error) == "LIMIT_EXCEEDED", error
    assert error["extensions"]["reason"] == "RATE_LIMITED", error
    retry_after = error["extensions"]["retryAfter"]
    assert 0 < retry_after <= at_most, error
    return retry_after


# ------------------------------------------------------------------ rate limits (in-process)


@pytest.fixture(scope="module")
async def limited_server(migrated_url: str):
    settings = make_settings(
        migrated_url,
        env="production",
        jwt_secret=SECRET,
        rate_group_per_second=2,
        rate_group_burst=3,
        rate_direct_per_second=2,
        rate_direct_burst=2,
        rate_add_members_per_second=2,
        rate_add_members_burst=2,
        rate_search_per_second=2,
        rate_search_burst=2,
        max_groups_per_day=0,
    )
    async with RunningServer(settings) as server:
        yield server


@pytest.fixture
async def limited(limited_server: RunningServer):
    async with httpx.AsyncClient(timeout=30) as http:
        yield GraphQLClient(http, limited_server.url, limited_server.settings)


async def test_create_group_beyond_its_burst_is_rate_limited_and_writes_nothing(limited, engine):
    for i in range(3):
        await limited.data(CREATE_GROUP, {"t": f"g{i}", "m": ["2", "3"]}, user=101)
    before = await _counts(engine)
    error = await limited.error(CREATE_GROUP, {"t": "one too many", "m": ["2", "3"]}, user=101)
    retry_after = _rate_limited(error, at_most=0.5)
    assert await _counts(engine) == before
    # another user is not slowed down by the first one's bucket
    await limited.data(CREATE_GROUP, {"t": "other", "m": ["2"]}, user=102)
    # and after retryAfter the first may go on
    await asyncio.sleep(retry_after + 0.05)
    await limited.data(CREATE_GROUP, {"t": "later", "m": ["2"]}, user=101)


async def test_create_direct_conversation_beyond_its_burst_is_rate_limited(limited, engine):
    await limited.data(CREATE_DIRECT, {"u": "2"}, user=201)
    await limited.data(CREATE_DIRECT, {"u": "3"}, user=201)
    before = await _counts(engine)
    _rate_limited(await limited.error(CREATE_DIRECT, {"u": "4"}, user=201), at_most=0.5)
    assert await _counts(engine) == before


async def test_add_members_beyond_its_burst_is_rate_limited_and_adds_nobody(limited, engine):
    cid = (await limited.data(CREATE_GROUP, {"t": "g", "m": ["2"]}, user=301))["createGroup"]["id"]
    await limited.data(ADD_MEMBERS, {"c": cid, "u": ["3"]}, user=301)
    await limited.data(ADD_MEMBERS, {"c": cid, "u": ["4"]}, user=301)
    before = await _counts(engine)
    _rate_limited(await limited.error(ADD_MEMBERS, {"c": cid, "u": ["5", "6"]}, user=301), at_most=0.5)
    assert await _counts(engine) == before


SEARCH = "query($q: String!) { searchMessages(query: $q) { nodes { seq } } }"


def test_the_limiter_table_names_every_operation_the_resolvers_limit_and_no_other() -> None:
    """ratelimit.OPERATION_LIMITS is the one table (with the rows feature modules declare beside their
    resolvers): each limits.check("op", ...) in graphql/ names a row of it, each row is checked somewhere,
    and each limit has its settings (Limiters builds them all)."""
    src = Path(__file__).resolve().parents[2] / "src" / "chatgql" / "graphql"
    checked: set[str] = set()
    for path in src.rglob("*.py"):
        for operation in re.findall(r"limits\.check\(([^,]*),", path.read_text()):
            checked |= set(re.findall(r'"(\w+)"', operation))
    assert checked == set(OPERATION_LIMITS), checked ^ set(OPERATION_LIMITS)
    limits = Limiters(make_settings("postgresql://unused/x", rate_search_per_second=3), None)
    assert limits["editMessage"] is limits["sendMessage"]  # one bucket per limit
    assert limits["searchMessages"].rate == 3 and limits["searchMessages"].action == "searchMessages"
    with pytest.raises(KeyError):
        limits["noSuchOperation"]
    assert limits["pinMessage"] is limits["sendMessage"]  # declared by graphql/features/pins.py
    declare_limits({"pinMessage": "send"})  # the same again: nothing changes
    with pytest.raises(ValueError, match="already limited"):
        declare_limits({"pinMessage": "read"})


async def test_search_beyond_its_burst_is_rate_limited_per_user(limited):
    await limited.data(SEARCH, {"q": "hello"}, user=501)
    await limited.data(SEARCH, {"q": "hello"}, user=501)
    _rate_limited(await limited.error(SEARCH, {"q": "hello"}, user=501), at_most=0.5)
    await limited.data(SEARCH, {"q": "hello"}, user=502)  # another user has a bucket of their own
    for _ in range(3):  # refused for its input before it takes a token
        assert error_code(await limited.error(SEARCH, {"q": "x" * 10_000}, user=503)) == "BAD_USER_INPUT"
    await limited.data(SEARCH, {"q": "hello"}, user=503)


async def test_a_refused_input_costs_no_rate_token(limited):
    for _ in range(5):  # more than the burst, all refused for their input
        error = await limited.error(CREATE_GROUP, {"t": " ", "m": ["2"]}, user=401)
        assert error_code(error) == "BAD_USER_INPUT"
    await limited.data(CREATE_GROUP, {"t": "fine", "m": ["2"]}, user=401)


async def test_the_probe_of_30_groups_of_1000_stops_at_the_default_burst(prod: ServeProcess, engine):
    """The reported probe, against defaults: 30 createGroup of 1,000 arbitrary ids in a row."""
    members = [str(n) for n in range(10_000, 10_999)]
    answers = []
    async with httpx.AsyncClient(timeout=60) as http, Bystander(prod) as bystander:
        for i in range(30):
            response = await http.post(
                prod.url,
                json={"query": CREATE_GROUP, "variables": {"t": f"spam {i}", "m": members}},
                headers=prod.headers(7001),
            )
            assert response.status_code == 200, response.text[:300]
            answers.append(response.json())
    made = [a for a in answers if "errors" not in a]
    refused = [a["errors"][0] for a in answers if "errors" in a]
    defaults = prod.settings
    assert len(made) <= defaults.rate_group_burst + 1  # one more may refill while they run
    assert refused and all(error_code(e) == "LIMIT_EXCEEDED" and e["extensions"]["retryAfter"] > 0 for e in refused)
    conversations, memberships = await _counts(engine)
    assert conversations == len(made) and memberships == 1000 * len(made)
    bystander.assert_served(max_latency=2.0)  # generous: two cores shared with the test and PostgreSQL


# ------------------------------------------------------------------ groups per day (PostgreSQL, across processes)


async def _create_group(http: httpx.AsyncClient, server: ServeProcess, user: int, title: str) -> dict:
    response = await http.post(
        server.url, json={"query": CREATE_GROUP, "variables": {"t": title, "m": ["2"]}}, headers=server.headers(user)
    )
    assert response.status_code == 200, response.text[:300]
    return response.json()


async def test_the_daily_group_cap_holds_across_processes_and_restarts(migrated_url, engine):
    env = {"CHATGQL_MAX_GROUPS_PER_DAY": "3", "CHATGQL_RATE_GROUP_PER_SECOND": "0"}
    owner = 8001
    async with httpx.AsyncClient(timeout=60) as http:
        async with serve_process(migrated_url, **env) as a, serve_process(migrated_url, **env) as b:
            # 10 at once, spread over two processes: exactly 3 get through
            answers = await asyncio.gather(*(_create_group(http, (a, b)[i % 2], owner, f"g{i}") for i in range(10)))
            made = [x for x in answers if "errors" not in x]
            refused = [x["errors"][0] for x in answers if "errors" in x]
            assert len(made) == 3, answers
            for error in refused:
                assert error_code(error) == "LIMIT_EXCEEDED" and error["extensions"]["reason"] == "GROUPS_PER_DAY"
                assert 86_000 < error["extensions"]["retryAfter"] <= 86_400
            assert await _counts(engine) == (3, 6)
            # another user has a cap of their own
            assert "errors" not in await _create_group(http, a, owner + 1, "theirs")
        async with serve_process(migrated_url, **env) as restarted:
            again = await _create_group(http, restarted, owner, "after a restart")
            assert error_code(again["errors"][0]) == "LIMIT_EXCEEDED"
        assert await _counts(engine) == (4, 8)


async def test_groups_older_than_a_day_no_longer_count(migrated_url, engine):
    env = {"CHATGQL_MAX_GROUPS_PER_DAY": "2", "CHATGQL_RATE_GROUP_PER_SECOND": "0"}
    async with httpx.AsyncClient(timeout=60) as http, serve_process(migrated_url, **env) as server:
        for i in range(2):
            assert "errors" not in await _create_group(http, server, 8101, f"g{i}")
        assert "errors" in await _create_group(http, server, 8101, "third")
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE conversation SET created_at = now() - interval '25 hours'"))
        assert "errors" not in await _create_group(http, server, 8101, "a day later")


# ------------------------------------------------------------------ the membership policy hook


class BlockList:
    """A deployment's policy: user 666 accepts nobody; records what it was asked."""

    asked: list[MembershipRequest] = []

    def __init__(self, settings) -> None:
        self.settings = settings

    async def check_add_members(self, request: MembershipRequest) -> None:
        BlockList.asked.append(request)
        if "666" in request.user_ids:
            raise Forbidden("one of these people does not accept being added")


@pytest.fixture(scope="module")
async def policed_server(migrated_url: str):
    settings = make_settings(migrated_url, membership_policy=f"{__name__}:BlockList")
    async with RunningServer(settings) as server:
        yield server


@pytest.fixture
async def policed(policed_server: RunningServer):
    BlockList.asked.clear()
    async with httpx.AsyncClient(timeout=30) as http:
        yield GraphQLClient(http, policed_server.url, policed_server.settings)


async def test_the_policy_refuses_a_group_with_someone_who_declines_and_nothing_is_written(policed, engine):
    before = await _counts(engine)
    error = await policed.error(CREATE_GROUP, {"t": "g", "m": ["2", "666"]}, user=1)
    assert error_code(error) == "FORBIDDEN"
    assert await _counts(engine) == before
    assert BlockList.asked == [MembershipRequest("1", ("2", "666"), "GROUP", None)]


async def test_the_policy_is_asked_only_about_people_not_yet_in_the_group(policed, engine):
    cid = (await policed.data(CREATE_GROUP, {"t": "g", "m": ["2", "3"]}, user=1))["createGroup"]["id"]
    BlockList.asked.clear()
    await policed.data(ADD_MEMBERS, {"c": cid, "u": ["2", "3", "1"]}, user=1)  # all present: nothing to ask
    assert BlockList.asked == []
    await policed.data(ADD_MEMBERS, {"c": cid, "u": ["2", "4"]}, user=1)
    assert BlockList.asked == [MembershipRequest("1", ("4",), "GROUP", int(cid))]
    before = await _counts(engine)
    error = await policed.error(ADD_MEMBERS, {"c": cid, "u": ["5", "666"]}, user=2)
    assert error_code(error) == "FORBIDDEN"
    assert await _counts(engine) == before


async def test_a_non_member_gets_not_found_before_the_policy_is_asked(policed):
    cid = (await policed.data(CREATE_GROUP, {"t": "g", "m": ["2"]}, user=1))["createGroup"]["id"]
    BlockList.asked.clear()
    error = await policed.error(ADD_MEMBERS, {"c": cid, "u": ["666"]}, user=99)
    assert error_code(error) == "NOT_FOUND"
    assert BlockList.asked == []


async def test_the_policy_is_asked_when_a_direct_conversation_is_created_not_when_it_exists(policed, engine):
    error = await policed.error(CREATE_DIRECT, {"u": "666"}, user=1)
    assert error_code(error) == "FORBIDDEN"
    assert (await _counts(engine))[0] == 0
    first = await policed.data(CREATE_DIRECT, {"u": "2"}, user=1)
    asked = len(BlockList.asked)
    again = await policed.data(CREATE_DIRECT, {"u": "1"}, user=2)
    assert again == first and len(BlockList.asked) == asked


def test_an_unset_policy_allows_all_and_a_bad_one_stops_the_start():
    assert load_policy(None, None) is ALLOW_ALL
    for path in ("no_colon", "chatgql.nothing_here:X", f"{__name__}:NoSuchThing"):
        with pytest.raises((ValueError, ImportError, AttributeError)):
            load_policy(path, None)
    with pytest.raises(TypeError):
        load_policy(f"{__name__}:_not_a_policy", None)


def _not_a_policy(settings) -> Sequence[int]:
    return [1, 2]
