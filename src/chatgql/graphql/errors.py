"""Every GraphQL error leaves with one of the contract's codes, and nothing internal.

- ChatError raised by a service or resolver: its code and message.
- Errors before execution (syntax, validation, variable coercion): BAD_USER_INPUT.
- Anything else: logged with its traceback here, masked for the client as
  INTERNAL_SERVER_ERROR (no SQL, no stack text).
"""

from __future__ import annotations

import logging
from graphql import GraphQLError

from ..errors import ChatError

log = logging.getLogger("chatgql.graphql")

INTERNAL = "INTERNAL_SERVER_ERROR"


def is_internal(error: GraphQLError) -> bool:
    return error.path is not None and not isinstance(error.original_error, ChatError)


def client_error(error: GraphQLError) -> GraphQLError:
    original = error.original_error
    if original is None and (error.extensions or {}).get("code"):
        return error  # already in the contract's form
    if isinstance(original, ChatError):
        message, extensions = original.message, {**original.extensions, "code": original.code}
    elif error.path is None:
        message = error.message
        extensions = {**(error.extensions or {})}
        # The parser's token limit (MaxTokensLimiter) is a limit, not a typo.
        extensions.setdefault("code", "LIMIT_EXCEEDED" if "tokens. Parsing aborted" in message else "BAD_USER_INPUT")
    elif isinstance(original, GraphQLError) and original.extensions.get("code"):
        message, extensions = original.message, original.extensions
    else:
        message, extensions = "Internal server error", {"code": INTERNAL}
    return GraphQLError(
        message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions=extensions,
    )


def log_errors(errors: list[GraphQLError]) -> None:
    for error in errors:
        if is_internal(error):
            original = error.original_error or error
            log.error("internal error at %s", error.path, exc_info=(type(original), original, original.__traceback__))


def to_contract_errors(errors: list[GraphQLError]) -> None:
    """Log what is internal, then rewrite errors in place into the contract's form.

    Strawberry hands every error list of every path (parse, validation,
    execution, subscription events) to Schema.process_errors, and returns that
    same list to the client: rewriting it there covers all of them.
    """
    log_errors(errors)
    errors[:] = [client_error(error) for error in errors]
