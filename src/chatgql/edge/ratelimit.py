"""Per-user rate limits (token buckets): shared through Redis, or per process.

With a redis:// or redis+cluster:// bus (and CHATGQL_SHARED_RATE_LIMITS on, the
default) each bucket lives in that Redis, taken from by one atomic Lua script
on the server's clock: behind N processes a user gets the configured rate, not
N times it. `chatgql serve` with several workers and no Redis keeps them in its
supervisor's hub instead (events/hub.py: one round trip on a Unix socket). Without
either, or while that does not answer (within
CHATGQL_SHARED_RATE_LIMIT_TIMEOUT_SECONDS), each process counts on its own; the
switch is logged once each way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..errors import LimitExceeded

log = logging.getLogger(__name__)

# KEYS[1]: the bucket (a hash: t = tokens, ts = when, server time). ARGV: rate per second, burst.
# Returns {1, "0"} (taken) or {0, retry_after} (as text: Lua numbers come back as integers).
TOKEN_BUCKET_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 't', 'ts')
local tokens = tonumber(state[1])
local last = tonumber(state[2])
if tokens == nil or last == nil then
  tokens = burst
  last = now
end
tokens = math.min(burst, tokens + math.max(0, now - last) * rate)
local taken = 0
if tokens >= 1 then
  tokens = tokens - 1
  taken = 1
end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', tostring(now))
-- a bucket left alone this long is full again: the same as no bucket
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
if taken == 1 then
  return {1, '0'}
end
return {0, tostring((1 - tokens) / rate)}
"""

KEY_PREFIX = "chatgql.ratelimit"
# After Redis failed to answer, count per process this long before asking Redis again.
RETRY_REDIS_SECONDS = 5.0


def _limited(action: str, retry_after: float) -> LimitExceeded:
    retry_after = round(retry_after, 3)
    return LimitExceeded(
        f"too many {action} calls; retry after {retry_after} s", reason="RATE_LIMITED", retryAfter=retry_after
    )


def refill(tokens: float, since: float, now: float, rate: float, burst: float) -> float:
    """A token bucket's tokens at `now`: `tokens` at `since`, plus rate per second, at most burst."""
    return min(burst, tokens + (now - since) * rate)


class RateLimiter:
    """rate tokens per second, up to burst; rate <= 0 turns it off. Per process."""

    def __init__(self, action: str, rate: float, burst: int, max_keys: int = 100_000) -> None:
        self.action = action
        self.rate = rate
        self.burst = burst
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    async def check(self, user_id: str) -> None:
        """Take a token for user_id, or raise LIMIT_EXCEEDED with retryAfter (seconds)."""
        # take()'s body, not a call of it: a call is a tenth of a check (every mutation makes one)
        wait = self.wait_for_token(user_id)
        if wait is not None:
            raise _limited(self.action, wait)

    def take(self, user_id: str, now: float | None = None) -> None:
        wait = self.wait_for_token(user_id, now)
        if wait is not None:
            raise _limited(self.action, wait)

    def wait_for_token(self, user_id: str, now: float | None = None) -> float | None:
        """Take a token for user_id: None when taken, else the seconds until there is one."""
        if self.rate <= 0:
            return None
        now = time.monotonic() if now is None else now
        full = float(self.burst)
        tokens, last = self._buckets.pop(user_id, (full, now))
        tokens = refill(tokens, last, now, self.rate, full)
        if tokens < 1:
            self._buckets[user_id] = (tokens, now)
            return (1 - tokens) / self.rate
        self._buckets[user_id] = (tokens - 1, now)
        if len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)  # the longest idle user: a full bucket again
        return None


class Bucket:
    """One token bucket for one connection's own use (no key, no lock): rate tokens per second,
    up to burst, full at first; rate <= 0: take() always succeeds."""

    __slots__ = ("rate", "burst", "_tokens", "_stamp")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(max(burst, 1))
        self._tokens = self.burst
        self._stamp = time.monotonic()

    def take(self, now: float | None = None) -> bool:
        """Take a token: False when there is none left."""
        if self.rate <= 0:
            return True
        now = time.monotonic() if now is None else now
        tokens = refill(self._tokens, self._stamp, now, self.rate, self.burst)
        self._stamp = now
        if tokens < 1:
            self._tokens = tokens
            return False
        self._tokens = tokens - 1
        return True


class RedisStore:
    """The Redis (or Redis Cluster) the buckets live in, with the fall-back state of all limiters."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self._client: Any = None
        self._script: Any = None
        self._down_until = 0.0  # monotonic; while in the future, limiters count per process
        self.fallbacks = 0  # checks counted per process because Redis did not answer

    def _connect(self) -> Any:
        from ..events.backends import redis_client

        self._client = redis_client(self.url, self.timeout)
        self._script = self._client.register_script(TOKEN_BUCKET_LUA)
        return self._script

    async def start(self, timeout: float = 5.0) -> None:
        """Connect (a cluster's slot map too) before the first check, which has only `timeout` seconds."""
        self._script or self._connect()
        try:
            async with asyncio.timeout(timeout):
                if hasattr(self._client, "initialize"):
                    await self._client.initialize()
                else:
                    await self._client.ping()
        except Exception as error:
            log.warning("shared rate limits: Redis did not answer at start (%r); will count per process", error)

    async def take(self, action: str, user_id: str, rate: float, burst: int) -> tuple[bool, float] | None:
        """(taken, retry after) from Redis; None when Redis did not answer (count per process)."""
        now = time.monotonic()
        if now < self._down_until:
            self.fallbacks += 1
            return None
        script = self._script or self._connect()
        try:
            async with asyncio.timeout(self.timeout):
                taken, retry_after = await script(keys=[f"{KEY_PREFIX}.{action}.{user_id}"], args=[rate, burst])
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self._down_until == 0.0:
                log.warning("shared rate limits: Redis did not answer (%r); counting per process until it does", error)
            self._down_until = now + RETRY_REDIS_SECONDS
            self.fallbacks += 1
            return None
        if self._down_until:
            log.warning("shared rate limits: Redis answers again; counting in Redis")
            self._down_until = 0.0
        return bool(int(taken)), float(retry_after)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client, self._script = self._client, None, None
            await client.aclose()


class SharedStore(Protocol):
    """Where the buckets of every process live: RedisStore, or the workers' hub (events/hub.py)."""

    async def start(self, timeout: float = 5.0) -> None: ...

    async def take(self, action: str, user_id: str, rate: float, burst: int) -> tuple[bool, float] | None: ...

    async def close(self) -> None: ...


class SharedRateLimiter(RateLimiter):
    """A RateLimiter whose buckets live in Redis or the hub; per process while that does not answer."""

    def __init__(self, action: str, rate: float, burst: int, store: SharedStore) -> None:
        super().__init__(action, rate, burst)
        self.store = store

    async def check(self, user_id: str) -> None:
        if self.rate <= 0:
            return
        answer = await self.store.take(self.action, user_id, self.rate, self.burst)
        if answer is None:
            self.take(user_id)
            return
        taken, retry_after = answer
        if not taken:
            raise _limited(self.action, retry_after)


def shared_store(broadcast_url: str, enabled: bool, timeout: float) -> SharedStore | None:
    """Where to keep rate limits: the bus's Redis, or the workers' hub (events/hub.py), when sharing is on."""
    from ..events.backends import CLUSTER_SCHEMES
    from ..events.hub import HubStore, is_hub

    if not enabled:
        return None
    if is_hub(broadcast_url):
        return HubStore(broadcast_url, timeout)
    if urlsplit(broadcast_url).scheme not in ("redis", "rediss", *CLUSTER_SCHEMES):
        return None
    return RedisStore(broadcast_url, timeout)


def limiter(action: str, rate: float, burst: int, store: SharedStore | None) -> RateLimiter:
    return RateLimiter(action, rate, burst) if store is None else SharedRateLimiter(action, rate, burst, store)


# Every rate-limited operation -> the limit it takes a token from. A limit `x` is the settings
# rate_x_per_second and rate_x_burst (a rate of 0 turns it off); operations naming the same limit
# share one bucket per user, named after the first of them (its RATE_LIMITED message and Redis key).
# A feature module declares its own operations beside their resolvers (declare_limits); a new limit
# is two settings.
OPERATION_LIMITS: dict[str, str] = {
    "sendMessage": "send",
    "editMessage": "send",
    "deleteMessage": "send",
    "addReaction": "send",
    "removeReaction": "send",
    "markRead": "read",
    "markDelivered": "read",
    "markUnread": "read",
    "updateMembership": "read",
    "updateViewerSettings": "read",
    "typing": "typing",
    "createGroup": "group",
    "createDirectConversation": "direct",
    "addMembers": "add_members",
    "searchMessages": "search",
    "blockUser": "block",
    "reportMessage": "report",
    "reportUser": "report",
}


def declare_limits(table: dict[str, str]) -> None:
    """Add a feature's rate-limited operations (operation -> limit) to OPERATION_LIMITS, from the module
    that defines them, as it is imported (before the Limiters are built). An operation declared twice
    with another limit is a programming error."""
    for operation, name in table.items():
        if OPERATION_LIMITS.setdefault(operation, name) != name:
            raise ValueError(f"{operation} is already limited by {OPERATION_LIMITS[operation]}, not {name}")


class Limiters:
    """The per-user limiters of OPERATION_LIMITS, built from the settings; check(operation, user_id)."""

    def __init__(self, settings: Any, store: SharedStore | None, table: dict[str, str] = OPERATION_LIMITS) -> None:
        by_limit: dict[str, RateLimiter] = {}
        self._by_operation: dict[str, RateLimiter] = {}
        for operation, name in table.items():
            if name not in by_limit:
                rate = getattr(settings, f"rate_{name}_per_second")
                burst = getattr(settings, f"rate_{name}_burst")
                by_limit[name] = limiter(operation, rate, burst, store)
            self._by_operation[operation] = by_limit[name]

    def __getitem__(self, operation: str) -> RateLimiter:
        return self._by_operation[operation]  # KeyError: an operation missing from the table

    def check(self, operation: str, user_id: str) -> Awaitable[None]:
        """Await it: LimitExceeded (reason RATE_LIMITED, retryAfter) when user_id has no token left for
        operation. The limiter's own check, not a coroutine of its own around it (one less per mutation)."""
        return self._by_operation[operation].check(user_id)
