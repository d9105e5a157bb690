"""What the engine reads of the API, declared by the API on its own fields.

The engine (planning, prepared documents, parking, prebuilt pages, cost) never imports a type or a
resolver: the API says here, as data, what the engine needs to know of its fields.

- PER_EVENT: a resolver whose value is the same for every subscriber of an event (read once per
  event, or from the event itself) carries it in its field's metadata:
  `@strawberry.field(metadata=PER_EVENT)`. The engine's shared event results (engine/shared.py)
  reuse one subscriber's result for the others only when every field selected is a plain field or
  marked so.
- PRICING: what the operation's price (engine/cost.py) knows of the API's fields: the strings the
  server bounds, how many items each list answers at most, which fields answer a page, and the
  bounds it reads from the settings.
- prebuilt_page(shape): a connection field whose nodes a statement may build as JSON (engine/prebuilt.py);
  its resolver then finds a PrebuiltNodes in info.prebuilt.
- PARKABLE and PARKING: which subscription fields can park while idle (engine/parked.py), and the state
  their resolver parks with.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from graphql import FieldNode

    from ..settings import Settings
    from ..store.conversations import JsonObject

PER_EVENT_KEY = "per_event"
PER_EVENT: dict[str, Any] = {PER_EVENT_KEY: True}


# --- pricing ---------------------------------------------------------------------------------


class Arguments(Protocol):
    """What a pricing rule reads of a field's arguments (the engine's walk of one operation)."""

    def argument(self, node: FieldNode, name: str) -> tuple[bool, Any]:
        """(given, value) of an argument: a literal's value, a variable's (missing: not given)."""
        ...

    def count(self, node: FieldNode, name: str, *, default: int, cap: int) -> int:
        """An Int argument as a number of items: its default when absent or null, at most cap."""
        ...

    def length(self, node: FieldNode, name: str, *, cap: int) -> int:
        """A list argument's length, at most cap (a single value coerces to a list of one)."""
        ...

    def bound(self, name: str) -> int:
        """A bound of Pricing.bounds, as the running process has it."""
        ...


Rule = Callable[[Arguments, "FieldNode"], int]  # how many items a field answers at most
Bounded = int | str  # a number, or the name of one of Pricing.bounds


@dataclass(frozen=True)
class Bound:
    """A bound the price reads: its default, and how it is read from the settings."""

    default: int
    read: Callable[[Settings], int]


def count(argument: str, *, default: Bounded, cap: Bounded) -> Rule:
    """As many items as an Int argument asks (its default when absent), at most cap."""

    def rule(walk: Arguments, node: FieldNode) -> int:
        return walk.count(node, argument, default=_bounded(walk, default), cap=_bounded(walk, cap))

    return rule


def first_or_last(*, default: Bounded, cap: Bounded) -> Rule:
    """A page asked by `first` or, without it, `last`."""
    by_first, by_last = count("first", default=default, cap=cap), count("last", default=default, cap=cap)

    def rule(walk: Arguments, node: FieldNode) -> int:
        given, first = walk.argument(node, "first")
        return by_first(walk, node) if given and first is not None else by_last(walk, node)

    return rule


def length(argument: str, *, cap: Bounded) -> Rule:
    """As many items as a list argument holds, at most cap."""

    def rule(walk: Arguments, node: FieldNode) -> int:
        return walk.length(node, argument, cap=_bounded(walk, cap))

    return rule


def at_most(bound: Bounded) -> Rule:
    """Always the same most."""

    def rule(walk: Arguments, node: FieldNode) -> int:
        return _bounded(walk, bound)

    return rule


def _bounded(walk: Arguments, value: Bounded) -> int:
    return walk.bound(value) if isinstance(value, str) else value


DEFAULT_HINT = "fewer aliases"


@dataclass
class Pricing:
    """What the price knows of the API's fields, by (type, field) as the schema names them. Anything
    it is not told: a String costs 64, a list 100 items."""

    strings: dict[tuple[str, str], str] = field(default_factory=dict)  # -> the bound of its length
    lists: dict[tuple[str, str], Rule] = field(default_factory=dict)  # -> its items at most
    pages: dict[tuple[str, str], Rule] = field(default_factory=dict)  # -> the page its connection answers
    page_lists: set[str] = field(default_factory=set)  # list fields of any connection, a page each
    page_items: set[tuple[str, str]] = field(default_factory=set)  # other lists a page each (the page above)
    bounds: dict[str, Bound] = field(default_factory=dict)
    hint: str = DEFAULT_HINT  # what an over-priced operation's error says to ask for instead

    def declare(self, other: Pricing) -> None:
        """Add the API's declarations (graphql/pricing.py's, and each feature module's own beside its
        fields); a declaration without a hint of its own keeps the one declared before."""
        self.strings.update(other.strings)
        self.lists.update(other.lists)
        self.pages.update(other.pages)
        self.page_lists.update(other.page_lists)
        self.page_items.update(other.page_items)
        self.bounds.update(other.bounds)
        if other.hint != DEFAULT_HINT:
            self.hint = other.hint


PRICING = Pricing()  # filled by the API (graphql/pricing.py, feature modules) as it is imported


# --- prebuilt pages --------------------------------------------------------------------------

# A connection field's metadata key (`metadata=prebuilt_page(shape)`): its page's nodes may be built
# as JSON by the statement that reads them (engine/prebuilt.py).
PREBUILT_KEY = "chatgql.prebuilt"


@dataclass(frozen=True)
class JsonShape:
    """An object a statement can build as JSON: which of its fields, and from what."""

    type_name: str
    values: Mapping[str, str]  # GraphQL field name -> the statement's value that answers it
    # The fields the statement answers without its optional columns (PrebuiltNodes.beyond_plain).
    plain: frozenset[str]
    objects: Mapping[str, JsonShape] = field(default_factory=dict)  # fields answered by a nested object


def prebuilt_page(node: JsonShape) -> dict[str, Any]:
    """A connection field's metadata: its nodes (under `nodes` and `edges { node }`) are built as JSON
    of this shape when everything they select is in it."""
    return {PREBUILT_KEY: node}


@dataclass(frozen=True, slots=True)
class PrebuiltNodes:
    """What a prebuilt page's statement builds, as the plan found its selection (the resolver's
    info.prebuilt): `nodes` (objects[nodes]) and `edges { node }` (objects[edge_nodes]) as each
    selects them."""

    objects: tuple[JsonObject, ...]
    nodes: int | None  # which of objects answers `nodes`; None: not selected
    edge_nodes: int | None  # which answers `edges { node }` (edges without node: 0, never read); None: no edges
    beyond_plain: frozenset[str]  # the shapes (type names) whose selection reads more than their plain fields


# --- parked subscriptions --------------------------------------------------------------------


class Parking(Protocol):
    """A parkable subscription's state, as its resolver sees it (engine/parked.py's Parked)."""

    def events(
        self, register: Callable[[], Awaitable[Any]], payload: Callable[[dict, Any], Any]
    ) -> AsyncIterator[dict]:
        """What the resolver iterates: the buffered events, then it parks (the generator ends).
        register() makes the event registration, at the first run only; payload(event, context) is
        what the resolver yields for an event."""
        ...


# Root subscription fields whose resolver can park (it iterates PARKING's events when it is set), and
# the arguments that keep it from parking. Filled by the API (graphql/subscriptions.py).
PARKABLE: dict[str, frozenset[str]] = {}

# The Parking of the operation the current task runs: set by the websocket handlers for a parkable
# operation (engine/handshake.py), None otherwise.
PARKING: ContextVar[Parking | None] = ContextVar("PARKING", default=None)
