"""Global object ids (the Node interface's `id`): what each one names, and its text.

- Conversation: its id in decimal ("42"), the same `Conversation.id` every
  client already holds and passes as `conversationId`. Changing it would
  change the meaning of an existing field, so the one kind of id a client
  builds itself stays what it is.
- Message, Member, Viewer: opaque, url-safe base64 (no padding) of
  "Message:<conversationId>:<seq>", "Member:<conversationId>:<userId>",
  "Viewer:<userId>" (the user id as given, in UTF-8: a decimal user id of before
  string user ids is the same text, so its ids did not change; the user id is
  last, so a ":" in it needs no escape). Such a text always contains letters, so it can never be
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

from ..services.checks import MAX_ID, MAX_USER_ID_CHARS, is_user_id

_DECIMAL = re.compile(r"[1-9][0-9]{0,18}")
# base64 of the longest: "Member:<19 digits>:<255 characters of up to 4 bytes>"
_OPAQUE = re.compile(r"[A-Za-z0-9_-]{8,%d}" % ((len("Member::") + 19 + 4 * MAX_USER_ID_CHARS) * 4 // 3 + 4))
# type name -> how many numbers follow, and whether a user id comes after them
_KINDS = {"Message": (2, False), "Member": (1, True), "Viewer": (0, True)}


@dataclass(frozen=True, slots=True)
class GlobalId:
    """A parsed id: type name, its numeric keys (conversation: (id,); message: (cid, seq);
    member: (cid,); viewer: ()) and its user id (member, viewer)."""

    type_name: str
    keys: tuple[int, ...]
    user_id: str | None = None


def _opaque(type_name: str, *keys: int | str) -> str:
    raw = ":".join((type_name, *map(str, keys))).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def message_id(conversation_id: int, seq: int) -> str:
    return _opaque("Message", conversation_id, seq)


def member_id(conversation_id: int, user_id: str) -> str:
    return _opaque("Member", conversation_id, user_id)


def viewer_id(user_id: str) -> str:
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
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    type_name, _, rest = raw.partition(":")
    if type_name not in _KINDS:
        return None
    numbers, with_user = _KINDS[type_name]
    parts = rest.split(":", numbers) if with_user else rest.split(":")
    user_id = parts.pop() if with_user else None
    # Every key is positive (ids and seqs start at 1), in decimal without leading zeros.
    if len(parts) != numbers or not all(_DECIMAL.fullmatch(p) for p in parts):
        return None
    if user_id is not None and not is_user_id(user_id):
        return None
    keys = tuple(int(p) for p in parts)
    tail = () if user_id is None else (user_id,)
    if any(k > MAX_ID for k in keys) or _opaque(type_name, *keys, *tail) != text:
        return None
    return GlobalId(type_name, keys, user_id)
