"""Who is online: the users with an acknowledged websocket, in this process and, with a Redis bus,
in every process of the deployment, or, on the hub of `chatgql serve` with several workers and no
Redis, in every worker of that serve (what the webhooks tell the app, so it pushes only to the
offline members of a conversation).

Each process counts its own sockets per user. With Redis it also keeps, in the bus's Redis, a
set of its online users ({chatgql.presence}.<process>) and its own entry in a sorted set of the
live processes ({chatgql.presence}.processes, scored by when the entry expires); both are
refreshed every heartbeat and expire without one, so a process that dies (SIGKILL) drops out
within presence_ttl. Changes are written by the heartbeat loop (woken at once), never on the
websocket's own path. One hash tag: every key is in one Redis Cluster slot.

On the hub (events/hub.py), each worker tells its supervisor's hub as its users come and go, at
once, on a connection of its own, and asks the hub on that connection about the users it has no
socket of (one round trip; the hub has read what the worker told before it answers, as Redis has
a process's entry after settled()); the supervisor, whose deliverer asks, reads the hub's table in
process. A worker whose connection ends drops out of it (it dies with its supervisor anyway).

A user is online when any live process lists them. When Redis (or the hub) does not answer, only
this process's sockets count: a member is then taken for offline (pushed to), never silently skipped.

on_change, when set, is told (user, here) as a user's first socket in this process opens and as
their last one here closes; settled() waits until this process's entry says so (services/presence.py
asks online() after it, so the last of two processes to let a user go sees them offline).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from .hub import Hub, HubPresenceLink

log = logging.getLogger(__name__)

PREFIX = "{chatgql.presence}"
PROCESSES = f"{PREFIX}.processes"


class Presence:
    def __init__(
        self,
        redis_url: str | None,
        *,
        heartbeat_seconds: float = 5.0,
        timeout: float = 1.0,
        hub: Hub | None = None,
        hub_link: HubPresenceLink | None = None,
    ) -> None:
        """hub: the hub this process serves (the supervisor: asks it); hub_link: this worker's
        link to its supervisor's hub (tells it)."""
        self._redis_url = redis_url
        self._hub = hub
        self._hub_link = hub_link
        self._heartbeat = heartbeat_seconds
        self._ttl_ms = int(heartbeat_seconds * 3 * 1000)
        self._timeout = timeout
        self._local: Counter[Hashable] = Counter()
        self._changed: set[Hashable] = set()
        self._resync = True  # write the whole set (at start, after Redis failed)
        self._wake = asyncio.Event()
        self._client: Any = None
        self._writing = False
        self._writes = 0  # writes to Redis that succeeded (settled() waits for the next)
        self._written = asyncio.Event()
        self.on_change: Callable[[Hashable, bool], None] | None = None
        self.process = uuid.uuid4().hex[:12]
        self._key = f"{PREFIX}.{self.process}"

    @property
    def shared(self) -> bool:
        return self._redis_url is not None or self._hub is not None or self._hub_link is not None

    def connected(self, user: Hashable) -> None:
        self._local[user] += 1
        if self._local[user] == 1:
            self._changed.add(user)
            self._wake.set()
            if self._hub_link is not None:
                self._hub_link.tell(str(user), True)
            if self.on_change is not None:
                self.on_change(user, True)

    def disconnected(self, user: Hashable) -> None:
        self._local[user] -= 1
        if self._local[user] <= 0:
            del self._local[user]
            self._changed.add(user)
            self._wake.set()
            if self._hub_link is not None:
                self._hub_link.tell(str(user), False)
            if self.on_change is not None:
                self.on_change(user, False)

    def here(self, user: Hashable) -> bool:
        return user in self._local

    async def settled(self) -> None:
        """Once what this process knows now is in Redis (a write that started after this call
        succeeded), or at most one heartbeat later; at once without Redis."""
        if self._redis_url is None or self._hub is not None or self._hub_link is not None:
            return
        target = self._writes + 2 if self._writing else self._writes + 1  # a write under way may predate the call
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._heartbeat):
                while self._writes < target:
                    await self._written.wait()

    async def online(self, users: Iterable[Hashable]) -> set[Hashable]:
        """Those of `users` with a socket open in any live process."""
        users = list(users)
        found = {user for user in users if user in self._local}
        rest = [user for user in users if user not in found]
        if rest and self._hub is not None:
            listed = self._hub.online(str(user) for user in rest)
            found.update(user for user in rest if str(user) in listed)
            return found
        if rest and self._hub_link is not None:
            try:
                listed = await self._hub_link.ask([str(user) for user in rest], self._timeout)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001  the hub is away: this worker's sockets only
                log.warning("presence: the hub did not answer (%r); counting this worker's sockets only", error)
                return found
            found.update(user for user in rest if str(user) in listed)
            return found
        if not rest or self._redis_url is None:
            return found
        try:
            client = self._connect()
            async with asyncio.timeout(self._timeout):
                processes = await client.zrangebyscore(PROCESSES, int(time.time() * 1000), "+inf")
                pipe = client.pipeline(transaction=False)
                keys = [f"{PREFIX}.{p.decode()}" for p in processes if p.decode() != self.process]
                for key in keys:
                    pipe.smismember(key, [str(user) for user in rest])
                answers = await pipe.execute() if keys else []
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001  Redis down: this process's sockets only
            log.warning("presence: Redis did not answer (%r); counting this process's sockets only", error)
            return found
        for flags in answers:
            found.update(user for user, flag in zip(rest, flags, strict=True) if flag)
        return found

    async def run(self) -> None:
        """Write this process's changes and heartbeats to Redis, or keep this worker's link to its
        supervisor's hub, until cancelled (no-op with neither)."""
        if self._hub_link is not None:
            await self._hub_link.run(lambda: [str(user) for user in self._local], self._heartbeat)
            return
        if self._redis_url is None:
            return
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._heartbeat):
                        await self._wake.wait()
                self._wake.clear()
                try:
                    self._writing = True
                    await self._write()
                    self._writes += 1
                    self._written.set()
                    self._written.clear()
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # noqa: BLE001
                    log.warning("presence: could not write to Redis (%r); trying again", error)
                    self._resync = True
                finally:
                    self._writing = False
        finally:
            await self.close()

    async def _write(self) -> None:
        client = self._connect()
        changed, self._changed = self._changed, set()
        pipe = client.pipeline(transaction=False)
        if self._resync:
            pipe.delete(self._key)
            changed = set()
            if self._local:
                pipe.sadd(self._key, *(str(user) for user in self._local))
        added = [str(user) for user in changed if user in self._local]
        removed = [str(user) for user in changed if user not in self._local]
        if added:
            pipe.sadd(self._key, *added)
        if removed:
            pipe.srem(self._key, *removed)
        now = int(time.time() * 1000)
        pipe.pexpire(self._key, self._ttl_ms)
        pipe.zadd(PROCESSES, {self.process: now + self._ttl_ms})
        pipe.zremrangebyscore(PROCESSES, "-inf", now)
        try:
            async with asyncio.timeout(self._timeout):
                await pipe.execute()
        except BaseException:
            self._changed |= changed
            raise
        self._resync = False

    def _connect(self) -> Any:
        if self._client is None:
            from .backends import redis_client

            assert self._redis_url is not None
            self._client = redis_client(self._redis_url, self._timeout)
        return self._client

    async def close(self) -> None:
        """Leave the live processes (a clean stop: nobody waits for the entry to expire)."""
        client, self._client = self._client, None
        if client is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self._timeout):
                await client.zrem(PROCESSES, self.process)
                await client.delete(self._key)
        with contextlib.suppress(Exception):
            await client.aclose()


def presence_for(broadcast_url: str, heartbeat_seconds: float) -> Presence:
    """The deployment's presence: in the bus's Redis when the bus is Redis; on the hub when the bus
    is the supervisor's hub (asked in the supervisor, told by its workers); else this process's."""
    from .backends import CLUSTER_SCHEMES
    from .hub import HubPresenceLink, is_hub, served_hub

    if is_hub(broadcast_url):
        hub = served_hub(broadcast_url)
        if hub is not None:
            return Presence(None, heartbeat_seconds=heartbeat_seconds, hub=hub)
        return Presence(None, heartbeat_seconds=heartbeat_seconds, hub_link=HubPresenceLink(broadcast_url))
    shared = urlsplit(broadcast_url).scheme in ("redis", "rediss", *CLUSTER_SCHEMES)
    return Presence(broadcast_url if shared else None, heartbeat_seconds=heartbeat_seconds)
