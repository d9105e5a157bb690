"""Input validation shared by every use case. Each raises BadUserInput or LimitExceeded."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import BadUserInput, LimitExceeded, NotFound

MAX_ID = 2**63 - 1
MIN_PAGE, MAX_PAGE, DEFAULT_PAGE = 1, 200, 50
_DECIMAL_ID = re.compile(r"[1-9][0-9]{0,18}")


def check_id(value: object, what: str = "id") -> int:
    """A positive 64-bit integer written in decimal (conversation ids; user ids: check_user_id)."""
    text = str(value)
    if not _DECIMAL_ID.fullmatch(text) or int(text) > MAX_ID:
        raise BadUserInput(f"{what} must be a positive 64-bit integer in decimal, got {text[:40]!r}")
    return int(text)


MAX_USER_ID_CHARS = 255
# No control characters (C0, DEL, C1) and no lone surrogates (not text PostgreSQL can store).
_USER_ID = re.compile(r"[^\x00-\x1f\x7f-\x9f\ud800-\udfff]{1,%d}" % MAX_USER_ID_CHARS)


def is_user_id(value: object) -> bool:
    """Whether value is a user id: a str of 1..255 characters without control characters."""
    return isinstance(value, str) and _USER_ID.fullmatch(value) is not None


def check_user_id(value: object, what: str = "userId") -> str:
    """A user id: the identity provider's subject, an opaque string of 1..255 characters with no
    control characters (a UUID, `auth0|5f7c…`, a Firebase UID, `user_2N…`, or a decimal id of
    before). Compared as given: byte for byte, case-sensitive, never trimmed."""
    if isinstance(value, str) and _USER_ID.fullmatch(value):
        return value
    if not isinstance(value, str):
        raise BadUserInput(f"{what} must be a string")
    if not value:
        raise BadUserInput(f"{what} must not be empty")
    if len(value) > MAX_USER_ID_CHARS:
        raise BadUserInput(f"{what} is longer than {MAX_USER_ID_CHARS} characters")
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise BadUserInput(f"{what} is not valid Unicode text")
    raise BadUserInput(f"{what} must not contain control characters")


def check_user_ids(values: Iterable[object], what: str, *, limit: int) -> list[str]:
    """Distinct user ids in first-seen order; more than `limit` of them is LIMIT_EXCEEDED."""
    seen: dict[str, None] = {}
    for value in values:
        seen[check_user_id(value, what)] = None
        if len(seen) > limit:
            raise LimitExceeded(f"at most {limit} {what}s in one call")
    return list(seen)


def check_text(value: str, what: str, *, max_chars: int) -> str:
    """Non-blank, at most max_chars characters, no NUL, valid Unicode (no lone surrogates)."""
    if not value.strip():
        raise BadUserInput(f"{what} must not be empty")
    if len(value) > max_chars:
        raise BadUserInput(f"{what} is longer than {max_chars} characters")
    if "\x00" in value:
        raise BadUserInput(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadUserInput(f"{what} is not valid Unicode text") from None
    return value


def check_seq(seq: int, what: str = "seq") -> int:
    if seq < 0:
        raise BadUserInput(f"{what} must not be negative")
    return seq


def check_page_size(size: int | None, what: str, default: int = DEFAULT_PAGE) -> int:
    if size is None:
        return default
    if not MIN_PAGE <= size <= MAX_PAGE:
        raise BadUserInput(f"{what} must be between {MIN_PAGE} and {MAX_PAGE}")
    return size


def check_seq_cursor(cursor: str | None, what: str) -> int | None:
    """A message cursor is its seq in decimal."""
    if cursor is None:
        return None
    if not re.fullmatch(r"0|[1-9][0-9]{0,18}", cursor) or int(cursor) > MAX_ID:
        raise BadUserInput(f"{what} must be a message cursor (a seq in decimal)")
    return int(cursor)


@dataclass(frozen=True, slots=True)
class PageRequest:
    """Messages with after < seq < before (before None: no upper bound),
    at most limit, from the newest end when from_end."""

    after: int
    before: int | None
    limit: int
    from_end: bool


def check_message_page(first: int | None, after: str | None, last: int | None, before: str | None) -> PageRequest:
    """Relay arguments -> a seq range. No arguments, or only last: the newest page."""
    if first is not None and last is not None:
        raise BadUserInput("pass either first or last, not both")
    after_seq = check_seq_cursor(after, "after") or 0
    before_seq = check_seq_cursor(before, "before")
    if first is not None or (after is not None and last is None):
        return PageRequest(after_seq, before_seq, check_page_size(first, "first"), from_end=False)
    return PageRequest(after_seq, before_seq, check_page_size(last, "last"), from_end=True)


def check_member_page(first: int | None, after: object | None, *, default: int, cap: int) -> tuple[str, int]:
    """(after_user_id, limit) for a list of members ascending by user id in text order, byte by byte
    (Conversation.members, Message.seenBy: "10" before "9"): first defaults to `default`, a first
    above `cap` is capped to it, a negative one is BAD_USER_INPUT; after is a user id (exclusive),
    none: from the start ("", before every user id)."""
    limit = default if first is None else first
    if limit < 0:
        raise BadUserInput("first must not be negative")
    return ("" if after is None else check_user_id(after, "after")), min(limit, cap)


# url, mime_type, name, size_bytes, width, height: one attachment's metadata (the bytes live elsewhere)
Attachment = tuple[str, str, str, int, int | None, int | None]
_MIME = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
_URL = re.compile(r"https?://[^\s]+")
MAX_URL_CHARS = 2048
MAX_NAME_CHARS = 255
MAX_DIMENSION = 100_000


def check_attachments(items: Sequence[Attachment], *, max_count: int, max_bytes: int) -> list[Attachment]:
    """At most max_count attachments, each with an http(s) url, a type/subtype mime type, a non-blank
    name, a size in 0..max_bytes and, when given, dimensions in 1..100,000. BAD_USER_INPUT otherwise."""
    if len(items) > max_count:
        raise BadUserInput(f"at most {max_count} attachments on one message", reason="TOO_MANY_ATTACHMENTS")
    checked = []
    for i, (url, mime, name, size, width, height) in enumerate(items):
        what = f"attachments[{i}]"
        if len(url) > MAX_URL_CHARS or not _URL.fullmatch(url):
            raise BadUserInput(f"{what}.url must be an http(s) URL of at most {MAX_URL_CHARS} characters")
        mime = mime.lower()
        if not _MIME.fullmatch(mime):
            raise BadUserInput(f"{what}.mimeType must be a type/subtype media type")
        name = check_text(name, f"{what}.name", max_chars=MAX_NAME_CHARS)
        if not 0 <= size <= max_bytes:
            raise BadUserInput(f"{what}.sizeBytes must be between 0 and {max_bytes}")
        for dimension, value in (("width", width), ("height", height)):
            if value is not None and not 1 <= value <= MAX_DIMENSION:
                raise BadUserInput(f"{what}.{dimension} must be between 1 and {MAX_DIMENSION}")
        checked.append((url, mime, name, size, width, height))
    return checked


def message_not_found(conversation_id: int, seq: int) -> NotFound:
    return NotFound(f"message {seq} not found in conversation {conversation_id}", conversationId=str(conversation_id))
