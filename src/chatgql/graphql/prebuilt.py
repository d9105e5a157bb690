"""Which of the API's fields PostgreSQL may answer as JSON (engine/prebuilt.py), and from what.

Query.inbox's nodes: a Conversation's fields from the inbox row (Conversation.from_row's values,
store.conversations.INBOX_JSON_VALUES), its lastMessage's from the row's last message
(Message.last_in_inbox_row's, LAST_MESSAGE_JSON_VALUES, derived from models.MessageRecord), each value
named as the field it answers. Their plain fields are those the page reads without the membership's
settings columns and the last message's lifecycle columns. Checked on import: every field either type
answers from a value it holds has its JSON value, so a new one cannot silently leave the inbox to the
ordinary way (tests/graphql/test_fastpath_switches.py compares the JSON with the ordinary answer).
"""

from __future__ import annotations

from collections.abc import Mapping

from strawberry.types import get_object_definition
from strawberry.utils.str_converters import to_camel_case

from ..compat.strawberry import value_fields
from ..engine.registry import JsonShape, PrebuiltNodes
from ..store.conversations import INBOX_JSON_VALUES, LAST_MESSAGE_JSON_VALUES
from .types import Conversation, Message


def json_values(cls: type, values: Mapping[str, str], where: str) -> dict[str, str]:
    """The JSON shape's values of an object type: GraphQL name -> the name of its value among `values` (which
    `where` defines), for each of its GraphQL fields `values` has. Raises when a field the type answers from a
    value it holds (no resolver) has none, or when `values` names a field the type lacks."""
    fields = get_object_definition(cls, strict=True).fields
    values_held = value_fields(cls)
    missing = set(values_held) - set(values)
    if missing:
        raise AssertionError(
            f"{cls.__name__}'s {sorted(missing)} have no JSON value for a prebuilt inbox page: add each to {where}"
            " (its SQL over the page's row, rendered as the GraphQL field renders it)"
        )
    unknown = set(values) - {f.python_name for f in fields}
    if unknown:
        raise AssertionError(f"{where} names {sorted(unknown)}, no fields of {cls.__name__}")
    shown = set(values_held) | {f.python_name for f in fields if f.base_resolver is not None}  # not private
    return {to_camel_case(name): name for name in values if name in shown}


INBOX_NODE = JsonShape(
    "Conversation",
    json_values(Conversation, INBOX_JSON_VALUES, "store/conversations.py INBOX_JSON_VALUES"),
    Conversation.PLAIN_FIELDS,
    objects={
        "lastMessage": JsonShape(
            "Message",
            json_values(Message, LAST_MESSAGE_JSON_VALUES, "store/conversations.py LAST_MESSAGE_JSON_VALUES"),
            Message.PLAIN_FIELDS,
        )
    },
)


def reads_settings(prebuilt: PrebuiltNodes) -> bool:
    """Whether the page's nodes select a field of the membership's settings."""
    return "Conversation" in prebuilt.beyond_plain


def reads_lifecycle(prebuilt: PrebuiltNodes) -> bool:
    """Whether their lastMessage selects a field of the message's lifecycle (edits, tombstone...)."""
    return "Message" in prebuilt.beyond_plain
