"""Custom scalars of the contract, and chatgql's parsers for Strawberry's UUID and DateTime.

A value a scalar cannot take is refused with a short GraphQLError of our own
(BAD_USER_INPUT once it leaves): never Python's exception text (int() of a
5,000-digit number names sys.set_int_max_str_digits), never the value itself.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any, NewType

import dateutil.parser
import orjson
import strawberry
from graphql import GraphQLError, IntValueNode, StringValueNode, ValueNode
from strawberry.types.scalar import ScalarDefinition

Long = NewType("Long", int)

_MIN, _MAX = -(2**63), 2**63 - 1
_MAX_LONG_CHARS = 20  # "-9223372036854775808"
_MAX_TEXT_CHARS = 64  # of a UUID or a DateTime: any longer is not one


def _parse_long(value: object) -> int:
    # bool is an int in Python; JSON true is not a number.
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and len(value) <= _MAX_LONG_CHARS and value.lstrip("-").isdigit() and value.isascii():
        number = int(value)
    else:
        raise GraphQLError("Long must be an integer")
    if not _MIN <= number <= _MAX:
        raise GraphQLError("Long must fit in a signed 64-bit integer")
    return number


def _parse_long_literal(node: ValueNode, _variables: object = None) -> int:
    if isinstance(node, (IntValueNode, StringValueNode)):
        text = node.value
        if len(text) > _MAX_LONG_CHARS:  # before int(): no 5,000-digit conversions
            raise GraphQLError("Long must fit in a signed 64-bit integer")
        return _parse_long(int(text) if isinstance(node, IntValueNode) else text)
    raise GraphQLError("Long must be an integer")


def _text_parser(parse: Callable[[str], Any], message: str) -> Callable[[object], Any]:
    """parse(value) for a string of at most _MAX_TEXT_CHARS; anything else: GraphQLError(message)."""

    def parse_value(value: object) -> Any:
        if not isinstance(value, str) or len(value) > _MAX_TEXT_CHARS:
            raise GraphQLError(message)
        try:
            return parse(value)
        except Exception:  # noqa: BLE001 - whatever the parser says, the answer is the same
            raise GraphQLError(message) from None

    return parse_value


_ISOFORMAT = dt.datetime.isoformat


def datetime_text(value: dt.datetime) -> str:
    """datetime.isoformat(value), the DateTime scalar's serialization, three times faster for the
    datetimes PostgreSQL hands out (timezone.utc; naive ones too): orjson writes those exactly as
    isoformat does (RFC 3339, microseconds only when not zero; tests/graphql/test_scalars.py), and an inbox
    page serializes a hundred of them. Anything else takes isoformat itself (and its TypeError)."""
    if type(value) is dt.datetime and (value.tzinfo is dt.UTC or value.tzinfo is None):
        return orjson.dumps(value)[1:-1].decode()
    return _ISOFORMAT(value)


SCALARS: dict[object, ScalarDefinition] = {
    Long: strawberry.scalar(
        name="Long",
        description="Signed 64-bit integer, serialized as a JSON number.",
        serialize=int,
        parse_value=_parse_long,
        parse_literal=_parse_long_literal,
    ),
    # Strawberry's own, with the same name, description and serialization; only refusals differ.
    uuid.UUID: strawberry.scalar(
        name="UUID",
        serialize=str,
        parse_value=_text_parser(uuid.UUID, "UUID must be a UUID such as 6f1c6a52-5a3e-4a43-9e0d-3b7d1f7c2a11"),
    ),
    dt.datetime: strawberry.scalar(
        name="DateTime",
        description="Date with time (isoformat)",
        serialize=datetime_text,
        parse_value=_text_parser(dateutil.parser.isoparse, "DateTime must be an ISO 8601 date with time"),
    ),
}
