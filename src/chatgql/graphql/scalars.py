"""Custom scalars of the contract."""

from __future__ import annotations

from typing import NewType

import strawberry
from graphql import IntValueNode, StringValueNode, ValueNode

Long = NewType("Long", int)

_MIN, _MAX = -(2**63), 2**63 - 1


def _parse_long(value: object) -> int:
    # bool is an int in Python; JSON true is not a number.
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.lstrip("-").isdigit() and value.isascii():
        number = int(value)
    else:
        raise ValueError("Long must be an integer")
    if not _MIN <= number <= _MAX:
        raise ValueError("Long must fit in a signed 64-bit integer")
    return number


def _parse_long_literal(node: ValueNode, _variables: object = None) -> int:
    if isinstance(node, (IntValueNode, StringValueNode)):
        return _parse_long(int(node.value) if isinstance(node, IntValueNode) else node.value)
    raise ValueError("Long must be an integer")


SCALARS = {
    Long: strawberry.scalar(
        name="Long",
        description="Signed 64-bit integer, serialized as a JSON number.",
        serialize=int,
        parse_value=_parse_long,
        parse_literal=_parse_long_literal,
    )
}
