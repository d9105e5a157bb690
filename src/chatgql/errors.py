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


def conversation_not_found(conversation_id: int | str) -> NotFound:
    """The same answer whether the conversation is missing or the caller is not in it."""
    return NotFound(f"conversation {conversation_id} not found", conversationId=str(conversation_id))
