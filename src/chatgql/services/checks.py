"""Input validation shared by every use case. Each raises BadUserInput or LimitExceeded."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import BadUserInput, LimitExceeded

MAX_ID = 2**63 - 1
MIN_PAGE, MAX_PAGE, DEFAULT_PAGE = 1, 200, 50
_DECIMAL_ID = re.compile(r"[1-9][0-9]{0,18}")


def check_id(value: object, what: str = "id") -> int:
    """A positive 64-bit integer written in decimal (conversation and user ids)."""
    text = str(value)
    if not _DECIMAL_ID.fullmatch(text) or int(text) > MAX_ID:
        raise BadUserInput(f"{what} must be a positive 64-bit integer in decimal, got {text[:40]!r}")
    return int(text)


def check_ids(values: Iterable[object], what: str, *, limit: int) -> list[int]:
    """Distinct ids in first-seen order; more than `limit` of them is LIMIT_EXCEEDED."""
    seen: dict[int, None] = {}
    for value in values:
        seen[check_id(value, what)] = None
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


def check_member_page(first: int | None, after: object | None, *, default: int, cap: int) -> tuple[int, int]:
    """(after_user_id, limit) for a list of members ascending by user id (Conversation.members,
    Message.seenBy): first defaults to `default`, a first above `cap` is capped to it, a negative one
    is BAD_USER_INPUT; after is a user id (exclusive), none: from the start."""
    limit = default if first is None else first
    if limit < 0:
        raise BadUserInput("first must not be negative")
    return (0 if after is None else check_id(after, "after")), min(limit, cap)
