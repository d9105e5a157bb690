"""One definition of each shape: a message's and a member's fields are models.py's records, an inbox node's
are Conversation's, and what repeats them (the tables, the GraphQL types, the prebuilt inbox's JSON) is
derived from them or checked against them on import. Each check, handed a shape that forgot a field, fails
and says what to add where; the API's own shapes pass them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import strawberry
from sqlalchemy import BigInteger, Column, MetaData, Table
from strawberry.utils.str_converters import to_camel_case

from chatgql.compat.strawberry import value_fields
from chatgql.graphql.prebuilt import INBOX_NODE, json_values
from chatgql.graphql.types import Conversation, Member, Message
from chatgql.graphql.types.common import check_record
from chatgql.models import (
    MEMBER_FIELDS,
    MESSAGE_FIELDS,
    MemberRecord,
    MessageRecord,
    conversation_member,
    message,
    record_fields,
)
from chatgql.store.conversations import INBOX_JSON_VALUES, LAST_MESSAGE_JSON_VALUES, _message_json_value


@strawberry.type
class Shown:
    a: int
    b: int | None = None
    hidden: strawberry.Private[int] = 0

    @strawberry.field
    def c(self) -> int:
        return self.a


@dataclass
class Record:
    a: int
    d: int


_metadata = MetaData()
_table = Table("thing", _metadata, Column("a", BigInteger), Column("b", BigInteger))


def test_a_record_field_without_its_column_fails_and_says_to_add_the_column():
    with pytest.raises(AssertionError, match=r"Record's \['d'\] are no columns of thing: add each column"):
        record_fields(Record, _table, every_column=False)


def test_a_column_without_its_record_field_fails_when_the_record_is_the_whole_row():
    @dataclass
    class Whole:
        a: int

    assert record_fields(Whole, _table, every_column=False) == ("a",)
    with pytest.raises(AssertionError, match=r"thing's columns \['b'\] have no field in models.Whole: add a field"):
        record_fields(Whole, _table, every_column=True)


def test_the_records_are_their_tables_rows():
    assert record_fields(MessageRecord, message, every_column=True) == MESSAGE_FIELDS
    assert record_fields(MemberRecord, conversation_member, every_column=False) == MEMBER_FIELDS


def test_a_record_field_the_type_lacks_fails_and_says_where_to_add_it():
    with pytest.raises(
        AssertionError,
        match=r"Shown has no field for \['d'\] of models.Record: add a field of the same name to graphql/types/x.py's",
    ):
        check_record(Shown, ("a", "b", "d"), "Record", "graphql/types/x.py")


def test_a_value_of_the_type_the_record_lacks_fails_as_nothing_would_fill_it():
    with pytest.raises(AssertionError, match=r"Shown's \['b'\] are no fields of models.Record, so nothing fills"):
        check_record(Shown, ("a", "c", "hidden"), "Record", "graphql/types/x.py")


def test_a_record_field_may_be_a_resolver_or_private_and_the_api_types_show_their_records():
    check_record(Shown, ("a", "b", "c", "hidden"), "Record", "graphql/types/x.py")
    check_record(Message, MESSAGE_FIELDS, "MessageRecord", "graphql/types/message.py")
    check_record(Member, MEMBER_FIELDS, "MemberRecord", "graphql/types/member.py")


def test_a_conversation_field_without_its_inbox_json_fails_and_names_the_list_to_add_it_to():
    forgot = {name: value for name, value in INBOX_JSON_VALUES.items() if name != "muted_until"}
    with pytest.raises(
        AssertionError,
        match=r"Conversation's \['muted_until'\] have no JSON value for a prebuilt inbox page: add each to "
        r"store/conversations.py INBOX_JSON_VALUES",
    ):
        json_values(Conversation, forgot, "store/conversations.py INBOX_JSON_VALUES")


def test_a_json_value_that_answers_no_field_fails():
    with pytest.raises(AssertionError, match=r"INBOX_JSON_VALUES names \['pinned_seq'\], no fields of Conversation"):
        json_values(Conversation, {**INBOX_JSON_VALUES, "pinned_seq": "p.pinned_seq"}, "INBOX_JSON_VALUES")


def test_the_prebuilt_inbox_answers_every_value_of_a_conversation_and_its_last_message():
    # the fields each type answers from a value it holds, and the resolvers it computes in SQL (pinned, id)
    assert set(INBOX_NODE.values) == {to_camel_case(name) for name in value_fields(Conversation)} | {"pinned"}
    last = INBOX_NODE.objects["lastMessage"].values
    assert set(last) == {to_camel_case(name) for name in value_fields(Message)} | {"id"}
    # a private field of the record (replyToSeq) has a value, but no GraphQL field to answer
    assert "reply_to_seq" in LAST_MESSAGE_JSON_VALUES and "replyToSeq" not in last


def test_the_last_messages_json_is_derived_from_the_record_each_field_from_its_column():
    for name in MESSAGE_FIELDS:
        if name not in ("conversation_id", "seq"):  # the row's id and last_seq
            assert f"lm.{name}" in LAST_MESSAGE_JSON_VALUES[name]
    with pytest.raises(AssertionError, match=r"models.MessageRecord.place is a .*: say in store/conversations.py"):
        _message_json_value("place", complex)
