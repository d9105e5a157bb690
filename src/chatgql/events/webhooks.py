"""Webhooks: events POSTed to the app's endpoint, so it can push to offline members.

The source is the webhook queue (store/webhooks.py): the relay copies each relayed outbox row
of the chosen kinds into it, in the statement that deletes the row from the outbox, so the queue
is durable and transactional with or without Kafka. One deliverer delivers at a time (it holds
an advisory lock on a connection of its own; others stand by and take over within
standby_seconds of its death), with a small pool of its own: a slow or dead endpoint holds
nothing the API, the relay or the live path use.

Order: a conversation's events are sent one at a time, in outbox order; a failure holds back
that conversation only (head-of-line blocking per conversation), up to `concurrency`
conversations in flight. Each failure (no 2xx within the timeout, which covers the whole
exchange) is tried again after an exponential backoff with jitter (or after a 429's or 503's
Retry-After when that is longer, never past the backoff's cap), up to `max_attempts` attempts;
then the event moves to the dead letters (webhook_dead) and the conversation goes on. A delete
withdraws its message's events from the queue and the dead letters (services/changes.py
tombstone_txn): a withdrawn row is not posted again (a request already on its way is not
recalled). At least once: a deliverer killed after the endpoint answered and before the row's
delete sends it again, with the same webhook-id.

Requests are signed as Standard Webhooks specifies (https://www.standardwebhooks.com/):
webhook-id, webhook-timestamp (epoch seconds) and webhook-signature "v1,<base64 HMAC-SHA256 of
'<id>.<timestamp>.<body>'>", the key being the base64-decoded secret (whsec_ prefix optional).
The body is fixed at the first attempt: {"type", "timestamp", "data": the event as subscribers
get it, its conversationId a string as in the GraphQL API}, and for message.new "recipients":
the members not online anywhere (events/presence.py), or in a group of more than
big_group_threshold members only its memberCount (a notice).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import ipaddress
import logging
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from ..db import Database
from ..store import conversations, health
from ..store import webhooks as queue
from .presence import Presence
from .signing import sign
from .types import DRAFT_UPDATED, MESSAGE_NEW, PRESENCE_CHANGED, REGISTRY, TYPING, with_text_user_ids

log = logging.getLogger(__name__)

SECRET_PREFIX = "whsec_"
MAX_ANSWER_BYTES = 64 * 1024  # of an endpoint's answer, read only to keep its connection


class WebhookConfigError(ValueError):
    """A webhook setting chatgql refuses to start with."""


def parse_secret(secret: str) -> tuple[bytes, ...]:
    """The signing keys: each space-separated secret base64-decoded (a whsec_ prefix is dropped),
    24 to 64 bytes. Several: every request is signed with each (a secret is rotated by adding the
    new one, updating the endpoint, then removing the old one)."""
    keys = []
    for text in secret.split():
        try:
            key = base64.b64decode(text.removeprefix(SECRET_PREFIX), validate=True)
        except ValueError:
            raise WebhookConfigError(
                "CHATGQL_WEBHOOK_SECRET must be base64 (optionally whsec_-prefixed), as Standard Webhooks secrets are"
            ) from None
        if not 24 <= len(key) <= 64:
            raise WebhookConfigError("CHATGQL_WEBHOOK_SECRET must decode to 24 to 64 bytes")
        keys.append(key)
    if not keys:
        raise WebhookConfigError("CHATGQL_WEBHOOK_SECRET is empty")
    return tuple(keys)


def parse_kinds(kinds: str) -> tuple[str, ...]:
    """CHATGQL_WEBHOOK_EVENTS: comma-separated event kinds (typing and presence are never stored, and a
    draft is its member's alone: not one of them)."""
    chosen = tuple(dict.fromkeys(kind.strip() for kind in kinds.split(",") if kind.strip()))
    known = sorted(kind for kind in REGISTRY if kind not in (TYPING, PRESENCE_CHANGED, DRAFT_UPDATED))
    unknown = [kind for kind in chosen if kind not in known]
    if unknown or not chosen:
        raise WebhookConfigError(
            f"CHATGQL_WEBHOOK_EVENTS: unknown event kind(s) {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(known)}"
        )
    return chosen


def _refused_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def check_url(url: str, allow_private: bool) -> None:
    """Refuse a webhook URL that is not https, or names a private, loopback, link-local or
    otherwise non-public address, unless allow_private (development, tests). Host names are
    resolved by `check_resolved` when the deliverer starts."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise WebhookConfigError(f"CHATGQL_WEBHOOK_URL must be an https:// URL, not {url!r}")
    if allow_private:
        return
    if parts.scheme != "https":
        raise WebhookConfigError(
            "CHATGQL_WEBHOOK_URL must be https:// (events are personal data); "
            "CHATGQL_WEBHOOK_ALLOW_PRIVATE=true allows http:// for development"
        )
    host = parts.hostname
    if host == "localhost" or host.endswith(".localhost"):
        raise _private(url)
    try:
        refused = _refused_address(host)
    except ValueError:  # a name, not an address: check_resolved looks at what it resolves to
        return
    if refused:
        raise _private(url)


def _private(url: str) -> WebhookConfigError:
    return WebhookConfigError(
        f"CHATGQL_WEBHOOK_URL {url!r} points at a private, loopback or link-local address; "
        "CHATGQL_WEBHOOK_ALLOW_PRIVATE=true allows it (development, an endpoint inside your network)"
    )


async def check_resolved(url: str, allow_private: bool) -> None:
    """Refuse a host name that resolves to a non-public address (a name that does not resolve
    now is let through: DNS may be down at start; requests to it fail and are retried)."""
    host = urlsplit(url).hostname
    if allow_private or host is None:
        return
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as error:
        log.warning("webhooks: %s does not resolve now (%s); delivering anyway", host, error)
        return
    if any(_refused_address(str(info[4][0])) for info in infos):
        raise _private(url)


def backoff(attempt: int, base: float, cap: float) -> float:
    """Seconds before attempt `attempt` + 1: base * 2^(attempt - 1), at most cap, with jitter
    (between half and all of it, so that retries of many conversations spread out)."""
    delay = min(cap, base * 2 ** min(attempt - 1, 62))
    return random.uniform(delay / 2, delay)


def retry_delay(attempt: int, base: float, cap: float, retry_after: float | None = None) -> float:
    """Seconds before attempt `attempt` + 1: the backoff, or what the endpoint's Retry-After asked
    for when that is longer, never more than cap."""
    delay = backoff(attempt, base, cap)
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap))
    return delay


RETRY_AFTER_STATUSES = frozenset({429, 503})


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds a Retry-After header asks to wait (delay-seconds or an HTTP date, RFC 9110); None
    when absent or not understood."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One attempt: error None when the endpoint took it (2xx); retry_after: what it asked for."""

    error: str | None
    retry_after: float | None = None


WITHDRAWN = Outcome("withdrawn")  # the row went (a delete withdrew it) before it was posted


class Deliverer:
    def __init__(
        self,
        database_url: str,
        presence: Presence,
        *,
        url: str,
        secret: tuple[bytes, ...],
        big_group_threshold: int,
        timeout_seconds: float = 5.0,
        max_attempts: int = 8,
        backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 600.0,
        concurrency: int = 16,
        poll_seconds: float = 0.5,
        standby_seconds: float = 1.0,
        db_connections: int = 2,
        on_delivered: Callable[[], None] = lambda: None,
        on_retried: Callable[[], None] = lambda: None,
        on_dead: Callable[[], None] = lambda: None,
    ) -> None:
        self._database_url = database_url
        self._presence = presence
        self._url = url
        self._key = secret
        self._big = big_group_threshold
        self._timeout = timeout_seconds
        self._max_attempts = max_attempts
        self._backoff = (backoff_seconds, max_backoff_seconds)
        self._concurrency = concurrency
        self._poll = poll_seconds
        self._standby = standby_seconds
        self._db_connections = db_connections
        self._on_delivered = on_delivered
        self._on_retried = on_retried
        self._on_dead = on_dead
        self._busy: dict[str, asyncio.Task] = {}
        self._wake = asyncio.Event()
        self.leading = False

    async def run(self) -> None:
        """Deliver (while this one holds the lead) until cancelled; failures are retried."""
        while True:
            try:
                await self._lead()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("webhook deliverer failed; retrying", exc_info=True)
            await asyncio.sleep(self._standby)

    async def _lead(self) -> None:
        database = await Database(self._database_url, max_size=self._db_connections).open()
        control = None
        try:
            control = await database.dedicated(
                application_name=f"{queue.DELIVERER_APPLICATION} {self._presence.process}"
            )
            while not await queue.take_lead(control):
                await asyncio.sleep(self._standby)
            self.leading = True
            log.info("webhook deliverer leads: posting to %s", self._url)
            async with httpx.AsyncClient(timeout=self._timeout, follow_redirects=False) as http:
                dispatch = asyncio.create_task(self._dispatch(database, http), name="webhook-dispatch")
                try:
                    while not dispatch.done():  # the lock lives with the session: stop when it is gone
                        await asyncio.wait({dispatch}, timeout=self._standby)
                        # A session that no longer answers may have lost the lock to a standby.
                        async with asyncio.timeout(max(self._standby * 4, 2.0)):
                            await health.ping(control)
                    dispatch.result()
                finally:
                    dispatch.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await dispatch
                    await self._stop_workers()
        finally:
            self.leading = False
            if control is not None:
                control.terminate()
            await database.close()

    async def _stop_workers(self) -> None:
        tasks = list(self._busy.values())
        self._busy.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def _dispatch(self, database: Database, http: httpx.AsyncClient) -> None:
        """Start a worker for every conversation whose head is due (at most `concurrency`), then
        sleep until the next head is due, a worker ends, or poll_seconds."""
        while True:
            free = self._concurrency - len(self._busy)
            wait = self._poll
            if free > 0:
                async with database.connection() as conn:
                    rows = await queue.heads(conn, list(self._busy), free)
                for row in rows:
                    if row["wait"] > 0:
                        wait = min(wait, row["wait"])
                        break  # earliest first: the rest are later still
                    self._busy[row["msg_key"]] = asyncio.create_task(
                        self._conversation(database, http, row), name=f"webhook-{row['msg_key']}"
                    )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 0.01)):
                    await self._wake.wait()
            self._wake.clear()

    async def _conversation(self, database: Database, http: httpx.AsyncClient, row: Any) -> None:
        """Deliver one conversation's due rows in order; a failure leaves it for later."""
        key = row["msg_key"]
        try:
            while row is not None:
                outcome = await self._attempt(database, http, row)
                error = outcome.error
                async with database.connection() as conn:
                    if outcome is WITHDRAWN:
                        row = await queue.delivered_next(conn, row["id"], key)
                    elif error is None:
                        self._on_delivered()
                        row = await queue.delivered_next(conn, row["id"], key)
                    elif row["attempts"] + 1 >= self._max_attempts:
                        log.warning(
                            "webhook %s dead-lettered after %d attempts: %s",
                            row["webhook_id"],
                            row["attempts"] + 1,
                            error,
                        )
                        self._on_dead()
                        row = await queue.dead_letter_next(conn, row["id"], key, error)
                    else:
                        self._on_retried()
                        delay = retry_delay(row["attempts"] + 1, *self._backoff, outcome.retry_after)
                        await queue.retry_later(conn, row["id"], delay, error)
                        row = None
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("webhook delivery of conversation %s failed; retrying", key, exc_info=True)
            await asyncio.sleep(self._standby)
        finally:
            if self._busy.get(key) is asyncio.current_task():
                del self._busy[key]
            self._wake.set()

    async def _attempt(self, database: Database, http: httpx.AsyncClient, row: Any) -> Outcome:
        """POST the row once (WITHDRAWN: not at all, a delete withdrew it)."""
        body = row["body"]
        if body is None:
            body = await self._body(database, row)
            async with database.connection() as conn:
                if not await queue.set_body(conn, row["id"], body):
                    return WITHDRAWN
        return await self.post(http, f"msg_{row['webhook_id'].hex}", body.encode())

    async def post(self, http: httpx.AsyncClient, webhook_id: str, data: bytes) -> Outcome:
        """POST a body once, signed, within the timeout for the whole exchange (connecting, sending,
        the answer's status and the part of its body that is read)."""
        timestamp = int(time.time())
        headers = {
            "content-type": "application/json",
            "webhook-id": webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(self._key, webhook_id, timestamp, data),
            "user-agent": "chatgql-webhooks",
        }
        try:
            async with asyncio.timeout(self._timeout):  # the whole exchange: httpx times each read alone
                request = http.build_request("POST", self._url, content=data, headers=headers)
                response = await http.send(request, stream=True)
                try:  # read (and drop) a short answer, so the connection is kept for the next request
                    read = 0
                    async for chunk in response.aiter_raw():
                        read += len(chunk)
                        if read > MAX_ANSWER_BYTES:
                            break  # a long one is not read: its connection is closed instead
                finally:
                    await response.aclose()
        except (httpx.HTTPError, TimeoutError, OSError) as failure:
            return Outcome(f"{type(failure).__name__}: {failure}"[:500] if str(failure) else type(failure).__name__)
        status = response.status_code
        if 200 <= status < 300:
            return Outcome(None)
        retry_after = None
        if status in RETRY_AFTER_STATUSES:
            retry_after = parse_retry_after(response.headers.get("retry-after"), time.time())
        return Outcome(f"HTTP {status}", retry_after)

    async def _body(self, database: Database, row: Any) -> str:
        event = with_text_user_ids(orjson.loads(row["payload"]))  # the body names users by text ids
        event["conversationId"] = str(event["conversationId"])  # an ID: text, as in the GraphQL API
        out: dict[str, Any] = {
            "type": event["type"],
            "timestamp": datetime.fromtimestamp(row["created"], UTC).isoformat(),
            "data": event,
        }
        if event["type"] == MESSAGE_NEW:
            out["recipients"] = await self._recipients(database, event)
        return orjson.dumps(out).decode()

    async def _recipients(self, database: Database, event: dict) -> dict[str, Any]:
        async with database.connection() as conn:
            members = await conversations.live_members(conn, int(event["conversationId"]), self._big, [])
        if members is None:  # the conversation is gone
            return {"memberCount": 0, "offline": []}
        count = members["member_count"]
        if count > self._big:
            return {"memberCount": count, "bigGroup": True, "offline": None}
        sender = event.get("senderId")
        others = [user for user in members["user_ids"] if user != sender]
        online = await self._presence.online(others)
        return {"memberCount": count, "offline": sorted(user for user in others if user not in online)}
