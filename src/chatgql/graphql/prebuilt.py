"""Which of the API's fields PostgreSQL may answer as JSON (engine/prebuilt.py), and from what.

Query.inbox's nodes: a Conversation's fields from the inbox row (Conversation.from_row's values,
store.conversations.INBOX_JSON_VALUES), its lastMessage's from the row's last message
(Message.last_in_inbox_row's, LAST_MESSAGE_JSON_VALUES), each value named as the field it answers.
Their plain fields are those the page reads without the membership's settings columns and the last
message's lifecycle columns.
"""

from __future__ import annotations

from strawberry.utils.str_converters import to_camel_case

from ..engine.registry import JsonShape, PrebuiltNodes
from ..store.conversations import INBOX_JSON_VALUES, LAST_MESSAGE_JSON_VALUES
from .types import Conversation, Message

INBOX_NODE = JsonShape(
    "Conversation",
    {to_camel_case(name): name for name in INBOX_JSON_VALUES},
    Conversation.PLAIN_FIELDS,
    objects={
        "lastMessage": JsonShape(
            "Message", {to_camel_case(name): name for name in LAST_MESSAGE_JSON_VALUES}, Message.PLAIN_FIELDS
        )
    },
)


def reads_settings(prebuilt: PrebuiltNodes) -> bool:
    """Whether the page's nodes select a field of the membership's settings."""
    return "Conversation" in prebuilt.beyond_plain


def reads_lifecycle(prebuilt: PrebuiltNodes) -> bool:
    """Whether their lastMessage selects a field of the message's lifecycle (edits, tombstone...)."""
    return "Message" in prebuilt.beyond_plain
