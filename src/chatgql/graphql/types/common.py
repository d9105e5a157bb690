"""What the object types share: the Node interface, PageInfo, the enums, and reading a selection."""

from __future__ import annotations

import enum
from typing import Any, TypeVar

import strawberry
from strawberry import ID
from strawberry.types import get_object_definition
from strawberry.types.nodes import FragmentSpread, InlineFragment

from ...compat.strawberry import value_fields


def selects(selections: list[Any], *path: str) -> bool:
    """Whether the field at path (GraphQL names) is selected among info.selected_fields
    selections, looking through fragments (@skip/@include are not evaluated)."""
    head, *rest = path
    for selection in selections:
        if isinstance(selection, FragmentSpread | InlineFragment):
            if selects(selection.selections, *path):
                return True
        elif selection.name == head and (not rest or selects(selection.selections, *rest)):
            return True
    return False


def selections_at(selections: list[Any], *path: str) -> list[list[Any]]:
    """The selections of every field at path (GraphQL names) among info.selected_fields selections,
    looking through fragments (@skip/@include are not evaluated)."""
    head, *rest = path
    found: list[list[Any]] = []
    for selection in selections:
        if isinstance(selection, FragmentSpread | InlineFragment):
            found += selections_at(selection.selections, *path)
        elif selection.name == head:
            found += selections_at(selection.selections, *rest) if rest else [selection.selections]
    return found


def selects_only(selections: list[Any], names: frozenset[str]) -> bool:
    """Whether every field these selections select (through fragments) is one of names."""
    return all(
        selects_only(selection.selections, names)
        if isinstance(selection, FragmentSpread | InlineFragment)
        else selection.name in names
        for selection in selections
    )


@strawberry.enum
class ConversationType(enum.Enum):
    DIRECT = "DIRECT"
    GROUP = "GROUP"


@strawberry.enum
class MemberRole(enum.Enum):
    OWNER = "OWNER"
    MEMBER = "MEMBER"
    ADMIN = "ADMIN"  # renames the group, changes roles (not the OWNER's)


@strawberry.interface(
    description="An object a client may cache by its `id` (Relay Global Object Identification): "
    "`id` is unique across all types and never changes; Query.node(id:) fetches the object again. "
    "A conversation's id is its decimal conversationId; other ids are opaque."
)
class Node:
    @strawberry.field(description="Globally unique and stable; opaque except for a Conversation's.")
    def id(self) -> ID:  # every implementation overrides it
        raise NotImplementedError


@strawberry.type
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


T = TypeVar("T")


def given(value: T) -> T | None:
    """None for an argument the query left out (strawberry.UNSET)."""
    return None if value is strawberry.UNSET else value


def check_record(cls: type, record: tuple[str, ...], name: str, where: str) -> None:
    """That an object type shows the fields of one of models.py's records (`name`, its field names `record`),
    and holds no value the record lacks: each record field is a field of cls of the same name (a value, a
    resolver that reads the row, or a strawberry.Private), and each field cls answers from a value it holds
    (no resolver) is a record field, so that building cls from a row by name fills every one. Raises,
    saying what to add where (`where`: cls's module), when it does not."""
    fields = {f.python_name for f in get_object_definition(cls, strict=True).fields}
    missing = [field for field in record if field not in fields]
    if missing:
        raise AssertionError(
            f"{cls.__name__} has no field for {missing} of models.{name}: add a field of the same name to {where}'s"
            f" {cls.__name__} (strawberry.Private when clients do not see it)"
        )
    unfilled = sorted(set(value_fields(cls)) - set(record))
    if unfilled:
        raise AssertionError(
            f"{cls.__name__}'s {unfilled} are no fields of models.{name}, so nothing fills them from a row: add"
            f" each to models.{name} (and its column: a migration and models.py's table), or make it a resolver"
        )
