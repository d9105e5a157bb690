"""Every GraphQL error leaves with one of the contract's codes, and nothing internal.

- ChatError raised by a service or resolver: its code and message.
- Errors before execution (syntax, validation, variable coercion): BAD_USER_INPUT,
  their text shortened by `redact`: no Python exception text, no long echo of
  the request (an operationName, a 5,000-digit number), and, where the schema
  is not introspectable, no "Did you mean ...?" (graphql-core suggests
  arguments, types, input fields and enum values, not only fields).
- The database unreachable, down or restarting (db.database_unavailable): UNAVAILABLE
  with retryAfter, logged as one warning line (an outage is not a bug to trace).
- Anything else: logged with its traceback here, masked for the client as
  INTERNAL_SERVER_ERROR (no SQL, no stack text).
"""

from __future__ import annotations

import logging
import re

from graphql import GraphQLError

from ..db import database_unavailable
from ..errors import ChatError, unavailable

log = logging.getLogger("chatgql.graphql")

INTERNAL = "INTERNAL_SERVER_ERROR"


MAX_ECHO_CHARS = 100  # of any one word of a message (a name, a value) quoted from the request
MAX_MESSAGE_CHARS = 300
# graphql-core's suggestions: " Did you mean 'a', 'b', or 'c'?", "... the enum value 'X'?",
# "... to use an inline fragment on 'T'?"; the names they list cannot contain '?'.
_SUGGESTION = re.compile(r"\s*Did you mean [^?]*\?")
# graphql-core quotes a parser's own exception (Python's text) and then the value it was given.
_ENCOUNTERED = ", but encountered error "
_LONG_WORD = re.compile(r"\S{%d,}" % (MAX_ECHO_CHARS + 1))
_WORD_END = re.compile(r"[\"'.,;:?!)\]}]{0,3}$")


def _shorten(match: re.Match[str]) -> str:
    word = match.group()
    return word[:MAX_ECHO_CHARS] + "\u2026" + _WORD_END.search(word).group()  # type: ignore[union-attr]


def redact(message: str, *, hide_suggestions: bool) -> str:
    """A message about the request, fit to send back: no parser exception text after
    "but encountered error", no suggestions when hide_suggestions, no word longer
    than MAX_ECHO_CHARS, at most MAX_MESSAGE_CHARS in all."""
    cut = message.find(_ENCOUNTERED)
    if cut >= 0:
        message = message[:cut] + "."
    if hide_suggestions:
        message = _SUGGESTION.sub("", message)
    message = _LONG_WORD.sub(_shorten, message)
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "\u2026"


def is_internal(error: GraphQLError) -> bool:
    return error.path is not None and not isinstance(error.original_error, ChatError) and not _unavailable(error)


def _unavailable(error: GraphQLError) -> bool:
    original = error.original_error
    while isinstance(original, GraphQLError):  # located again on the way out
        original = original.original_error
    return original is not None and database_unavailable(original)


def client_error(error: GraphQLError, *, hide_suggestions: bool = False) -> GraphQLError:
    original = error.original_error
    if original is None and (error.extensions or {}).get("code"):
        return error  # already in the contract's form
    if isinstance(original, ChatError):
        message, extensions = original.message, {**original.extensions, "code": original.code}
    elif _unavailable(error):
        coded = unavailable("the database is unavailable")
        message, extensions = coded.message, {**coded.extensions, "code": coded.code}
    elif error.path is None:
        message = redact(error.message, hide_suggestions=hide_suggestions)
        extensions = {**(error.extensions or {})}
        # The parser's token limit (MaxTokensLimiter) is a limit, not a typo.
        limit = "tokens. Parsing aborted" in error.message
        extensions.setdefault("code", "LIMIT_EXCEEDED" if limit else "BAD_USER_INPUT")
    elif isinstance(original, GraphQLError) and original.extensions and original.extensions.get("code"):
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
        if _unavailable(error):
            original = error.original_error
            log.warning("database unavailable at %s: %s: %s", error.path, type(original).__name__, original)
        elif is_internal(error):
            original = error.original_error or error
            log.error("internal error at %s", error.path, exc_info=(type(original), original, original.__traceback__))


def to_contract_errors(errors: list[GraphQLError], *, hide_suggestions: bool = False) -> None:
    """Log what is internal, then rewrite errors in place into the contract's form.

    Strawberry hands every error list of every path (parse, validation,
    execution, subscription events) to Schema.process_errors, and returns that
    same list to the client: rewriting it there covers all of them.
    """
    log_errors(errors)
    errors[:] = [client_error(error, hide_suggestions=hide_suggestions) for error in errors]
