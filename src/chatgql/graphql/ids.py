"""Global object ids (the Node interface's `id`): what each one names, and its text.

- Conversation: its id in decimal ("42"), the same `Conversation.id` every
  client already holds and passes as `conversationId`. Changing it would
  change the meaning of an existing field, so the one kind of id a client
  builds itself stays what it is.
- Message, Member, Viewer: opaque, url-safe base64 (no padding) of
  "Message:<conversationId>:<seq>", "Member:<conversationId>:<userId>",
  "Viewer:<userId>". Such a text always contains letters, so it can never be
  mistaken for a conversation's decimal id: every id names one object of one
  type. Each is stable (built from the keys that never change: a message's
  seq, a membership's pair of ids) and made from the object alone, so an
  event can carry it with no query.

Clients must treat ids as opaque; only conversation ids are also the
decimal `conversationId` the contract takes everywhere.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from ..services.checks import MAX_ID

_DECIMAL = re.compile(r"[1-9][0-9]{0,18}")
_OPAQUE = re.compile(r"[A-Za-z0-9_-]{8,80}")
_KINDS = {"Message": 2, "Member": 2, "Viewer": 1}  # type name -> how many numbers follow


@dataclass(frozen=True, slots=True)
class GlobalId:
    """A parsed id: type name and its keys (conversation: (id,); message: (cid, seq); ...)."""

    type_name: str
    keys: tuple[int, ...]


def _opaque(type_name: str, *keys: int) -> str:
    raw = ":".join((type_name, *map(str, keys))).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def message_id(conversation_id: int, seq: int) -> str:
    return _opaque("Message", conversation_id, seq)


def member_id(conversation_id: int, user_id: int) -> str:
    return _opaque("Member", conversation_id, user_id)


def viewer_id(user_id: int) -> str:
    return _opaque("Viewer", user_id)


def parse(text: object) -> GlobalId | None:
    """The object an id names; None when it is not an id this server makes.

    Only the exact text this module produces is accepted (one text per
    object): no padding, no other alphabet, no leading zeros.
    """
    if not isinstance(text, str):
        return None
    if _DECIMAL.fullmatch(text):
        number = int(text)
        return GlobalId("Conversation", (number,)) if number <= MAX_ID else None
    if not _OPAQUE.fullmatch(text):
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        return None
    type_name, *parts = raw.split(":")
    # Every key is positive (ids and seqs start at 1), in decimal without leading zeros.
    if _KINDS.get(type_name) != len(parts) or not all(_DECIMAL.fullmatch(p) for p in parts):
        return None
    keys = tuple(int(p) for p in parts)
    if any(k > MAX_ID for k in keys) or _opaque(type_name, *keys) != text:
        return None
    return GlobalId(type_name, keys)
