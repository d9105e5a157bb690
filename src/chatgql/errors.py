"""Domain errors. Each carries the contract's extensions.code.

Services raise these; graphql/errors.py turns them into GraphQL errors.
Nothing here knows about GraphQL.
"""

from __future__ import annotations


class ChatError(Exception):
    code = "INTERNAL_SERVER_ERROR"

    def __init__(self, message: str, **extensions: object) -> None:
        super().__init__(message)
        self.message = message
        self.extensions = extensions


class Unauthenticated(ChatError):
    code = "UNAUTHENTICATED"


class NotFound(ChatError):
    code = "NOT_FOUND"


class Forbidden(ChatError):
    code = "FORBIDDEN"


class BadUserInput(ChatError):
    code = "BAD_USER_INPUT"


class Conflict(ChatError):
    code = "CONFLICT"


class LimitExceeded(ChatError):
    code = "LIMIT_EXCEEDED"


class Unavailable(ChatError):
    """The request could not be served now (the database is down or restarting, the
    server is stopping); the same request may succeed after retryAfter seconds."""

    code = "UNAVAILABLE"


RETRY_AFTER_SECONDS = 1  # what an outage answers in retryAfter: clients back off from there


def unavailable(what: str) -> Unavailable:
    return Unavailable(f"{what}; retry after {RETRY_AFTER_SECONDS} s", retryAfter=RETRY_AFTER_SECONDS)


def conversation_not_found(conversation_id: int | str) -> NotFound:
    """The same answer whether the conversation is missing or the caller is not in it."""
    return NotFound(f"conversation {conversation_id} not found", conversationId=str(conversation_id))


BLOCKED = "BLOCKED"  # Forbidden's reason: a block between the two users (either way) refuses the call
BANNED = "BANNED"  # Forbidden's reason: the caller is banned app-wide


def blocked() -> Forbidden:
    """The same answer to the blocker and to the blocked, whichever of them asks (docs/guide/moderation.md)."""
    return Forbidden("refused: a block between these users", reason=BLOCKED)


def banned(until: str | None) -> Forbidden:
    """The answer to every request of a user banned app-wide; until: when the ban ends (ISO-8601), None: not set."""
    return Forbidden("this user is banned", reason=BANNED, until=until)
