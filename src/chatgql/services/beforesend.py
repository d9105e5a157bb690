"""The before-send hook: the app's endpoint, asked before a message is stored, accepts it, rejects
it (with a reason the sender is shown) or rewrites its body.

The request is a POST signed as the webhooks are (Standard Webhooks: webhook-id, webhook-timestamp,
webhook-signature; events/webhooks.py), with the body {"type": "message.before_send", "timestamp",
"data": {conversationId, senderId, clientMsgId, body}}. The answer is 200 with JSON
{"action": "accept"}, {"action": "reject", "reason": "..."} or {"action": "rewrite", "body": "..."}.
Anything else, or no answer within the timeout (the whole exchange), is a failure: with fail_open the
message is stored as sent, otherwise the send is UNAVAILABLE (reason BEFORE_SEND_UNAVAILABLE,
retryAfter) and nothing is stored.

A send stays idempotent on its clientMsgId. A rejection and a rewrite are kept (send_verdict, with
the sender and a SHA-256 of the body as sent): a retry of a rejected message is rejected the same
way and never stored, a retry of a rewritten one answers the stored message, and neither asks the
hook again; nor does a retry of a stored message. The hook is asked outside any transaction; the
verdict and the send are checked again under the conversation's lock (a concurrent retry that was
decided first wins, and this send is decided again from what it left). A non-member's send never
reaches the hook.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import httpx
import orjson

from ..db import Connection, Database
from ..errors import RETRY_AFTER_SECONDS, Conflict, Forbidden, Unavailable
from ..events.signing import sign
from ..store import conversations, verdicts

log = logging.getLogger(__name__)

ACCEPT, REJECT, REWRITE = "accept", "reject", "rewrite"
REJECTED, REWRITTEN = "REJECTED", "REWRITTEN"
MAX_REASON_CHARS = 200
MAX_ANSWER_BYTES = 256 * 1024


class HookFailed(Exception):
    """The endpoint did not answer with a verdict."""


class VerdictTaken(Exception):
    """Under the lock, the clientMsgId turned out decided or stored meanwhile: decide again."""


@dataclass(frozen=True, slots=True)
class Verdict:
    action: str
    body: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to store (body), and whether the send's transaction keeps a REWRITTEN verdict (digest of
    the body as sent); duplicate_seq: a rewritten message stored already, to answer as it is."""

    body: str
    digest: bytes
    asked: bool = False  # the hook was asked: the send checks, under the lock, that nothing was decided since
    rewritten: bool = False
    duplicate_seq: int | None = None


def digest_of(body: str) -> bytes:
    return hashlib.sha256(body.encode()).digest()


def parse_verdict(answer: Any, max_body_chars: int) -> Verdict:
    """The endpoint's JSON answer as a Verdict; HookFailed when it is none."""
    if not isinstance(answer, dict):
        raise HookFailed("the answer is not a JSON object")
    action = answer.get("action")
    if action == ACCEPT:
        return Verdict(ACCEPT)
    if action == REJECT:
        reason = answer.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise HookFailed("a reject's reason must be a string")
        reason = (reason or "").strip()[:MAX_REASON_CHARS] or None
        return Verdict(REJECT, reason=reason)
    if action == REWRITE:
        body = answer.get("body")
        if not isinstance(body, str) or not body.strip() or len(body) > max_body_chars:
            raise HookFailed(f"a rewrite's body must be a non-blank string of at most {max_body_chars} characters")
        return Verdict(REWRITE, body=body)
    raise HookFailed("action must be accept, reject or rewrite")


def rejected(reason: str | None) -> Forbidden:
    return Forbidden(
        "the message was rejected" + (f": {reason}" if reason else ""),
        reason="MESSAGE_REJECTED",
        rejectReason=reason,
    )


class BeforeSendHook:
    """The endpoint's client: one HTTP connection pool, opened and closed by the application's lifespan."""

    def __init__(
        self, url: str, keys: tuple[bytes, ...], *, timeout_seconds: float, fail_open: bool, max_body_chars: int
    ) -> None:
        self.url = url
        self.fail_open = fail_open
        self._keys = keys
        self._timeout = timeout_seconds
        self._max_body_chars = max_body_chars
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> BeforeSendHook:
        self._http = httpx.AsyncClient(timeout=self._timeout, follow_redirects=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def ask(self, conversation_id: int, sender_id: str, client_msg_id: UUID, body: str) -> Verdict:
        """The endpoint's verdict; on a failure, ACCEPT when failing open, else UNAVAILABLE."""
        assert self._http is not None, "open the hook first (async with)"
        now = time.time()
        data = orjson.dumps(
            {
                "type": "message.before_send",
                "timestamp": datetime.fromtimestamp(now, UTC).isoformat(),
                "data": {
                    "conversationId": str(conversation_id),
                    "senderId": sender_id,
                    "clientMsgId": str(client_msg_id),
                    "body": body,
                },
            }
        )
        webhook_id = f"msg_{uuid.uuid4().hex}"
        headers = {
            "content-type": "application/json",
            "webhook-id": webhook_id,
            "webhook-timestamp": str(int(now)),
            "webhook-signature": sign(self._keys, webhook_id, int(now), data),
        }
        try:
            async with asyncio.timeout(self._timeout):  # the whole exchange
                async with self._http.stream("POST", self.url, content=data, headers=headers) as response:
                    if response.status_code != 200:
                        raise HookFailed(f"answered HTTP {response.status_code}")
                    answer = b""
                    async for chunk in response.aiter_bytes():
                        answer += chunk
                        if len(answer) > MAX_ANSWER_BYTES:
                            raise HookFailed("the answer is too long")
            return parse_verdict(orjson.loads(answer), self._max_body_chars)
        except (httpx.HTTPError, TimeoutError, OSError, orjson.JSONDecodeError, HookFailed) as failure:
            log.warning(
                "the before-send hook failed (%s: %s); %s",
                type(failure).__name__,
                failure,
                "storing the message as sent" if self.fail_open else "refusing the send",
            )
            if self.fail_open:
                return Verdict(ACCEPT)
            raise Unavailable(
                f"the message could not be checked; retry after {RETRY_AFTER_SECONDS} s",
                reason="BEFORE_SEND_UNAVAILABLE",
                retryAfter=RETRY_AFTER_SECONDS,
            ) from None


def _reused(conversation_id: int, client_msg_id: UUID) -> Conflict:
    return Conflict(
        "clientMsgId was already used for another message in this conversation",
        conversationId=str(conversation_id),
        clientMsgId=str(client_msg_id),
    )


async def decide(
    database: Database, hook: BeforeSendHook, sender_id: str, conversation_id: int, client_msg_id: UUID, body: str
) -> Decision:
    """What the send does: store `body` (as sent, or rewritten), answer a rewritten message stored
    already, or raise (the same rejection again, CONFLICT for a decided clientMsgId reused, the
    hook's rejection, UNAVAILABLE). VerdictTaken: decided meanwhile, decide again."""
    digest = digest_of(body)
    async with database.connection() as conn:
        prior = await verdicts.prior(conn, conversation_id, client_msg_id, sender_id)
    if prior["verdict"] is not None:
        if prior["sender_id"] != sender_id or prior["body_sha256"] != digest:
            raise _reused(conversation_id, client_msg_id)
        if prior["verdict"] == REJECTED:
            raise rejected(prior["reason"])
        return Decision(body, digest, duplicate_seq=prior["seq"])
    if prior["seq"] is not None or not prior["member"]:  # stored already, or an outsider: the send answers
        return Decision(body, digest)
    verdict = await hook.ask(conversation_id, sender_id, client_msg_id, body)
    if verdict.action == REWRITE and verdict.body is not None and verdict.body != body:
        return Decision(verdict.body, digest, asked=True, rewritten=True)
    if verdict.action == REJECT:
        async with database.transaction() as conn:
            await check_undecided_txn(conn, conversation_id, client_msg_id, sender_id)
            await verdicts.record_txn(conn, conversation_id, client_msg_id, sender_id, digest, REJECTED, verdict.reason)
        raise rejected(verdict.reason)
    return Decision(body, digest, asked=True)


async def check_undecided_txn(conn: Connection, conversation_id: int, client_msg_id: UUID, sender_id: str) -> None:
    """Under the conversation's lock (until the transaction ends): VerdictTaken when client_msg_id
    was decided or stored since the hook was asked."""
    await conversations.lock_for_member_txn(conn, conversation_id, sender_id)
    prior = await verdicts.prior(conn, conversation_id, client_msg_id, sender_id)
    if prior["verdict"] is not None or prior["seq"] is not None:
        raise VerdictTaken


async def keep_decision_txn(
    conn: Connection, conversation_id: int, client_msg_id: UUID, sender_id: str, decision: Decision
) -> None:
    """In the send's transaction, before it: nothing decided since the hook was asked, and a rewrite is
    kept with the message."""
    await check_undecided_txn(conn, conversation_id, client_msg_id, sender_id)
    if decision.rewritten:
        await verdicts.record_txn(conn, conversation_id, client_msg_id, sender_id, decision.digest, REWRITTEN, None)
