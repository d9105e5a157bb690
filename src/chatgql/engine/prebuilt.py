"""A page's nodes as JSON that PostgreSQL builds, for the selections that read only columns.

The inbox is the first page every client loads, and most of its CPU was Python's per row: decoding
each column, an object per row and per nested object, then completing their fields one by one and
encoding them again (bench/results/perf-send.md). A connection field the API declares prebuilt
(registry.prebuilt_page, with the JsonShape of its nodes) is offered this: when every field its
nodes select is a value of the shape (and of its nested shapes), the statement builds each node's
answer itself (json_build_object, keys in the answer's order) and the plan passes the text through
(orjson.Fragment), under `nodes` and under `edges { node }` alike. Anything else and the page is
built the ordinary way.

Only a plan runs it (plan/compile.py): the plan collected the selection once, with @skip and
@include decided and fragments merged, so what it prebuilt holds for every run of that plan. The
differential tests (tests/graphql/plan/test_planner_differential.py) hold the two ways to the same
answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ..store.conversations import JsonObject, JsonText
from .registry import JsonShape, PrebuiltNodes


class Selection(Protocol):
    """A field's selection, as the plan collected it (plan/compile.Selection)."""

    def fields(self) -> Mapping[str, tuple[str, bool, Selection]]:
        """response key -> (field name, has arguments, its own Selection), in the answer's order."""
        ...


def page_nodes(shape: JsonShape, selection: Selection) -> PrebuiltNodes | None:
    """A connection's nodes as JSON of shape, or None when they select anything else."""
    nodes = edges = None
    for name, _, below in selection.fields().values():
        if name == "nodes" and nodes is None:
            nodes = below
        elif name == "edges" and edges is None:
            edges = below
        elif name not in ("pageInfo", "__typename"):  # a second nodes or edges (aliased): the ordinary way
            return None
    edge_node = None
    if edges is not None:
        for name, _, below in edges.fields().values():
            if name == "node" and edge_node is None:
                edge_node = below
            elif name not in ("cursor", "__typename"):
                return None
    names: dict[str, set[str]] = {}
    objects = []
    for found in (nodes, edge_node):
        if found is not None:
            built = _object(found, shape, names)
            if built is None:
                return None
            objects.append(built)
    if not objects:
        return None
    return PrebuiltNodes(
        objects=tuple(objects),
        nodes=None if nodes is None else 0,
        edge_nodes=None if edges is None else (0 if edge_node is None else len(objects) - 1),
        beyond_plain=frozenset(_beyond_plain(shape, names)),
    )


def _object(selection: Selection, shape: JsonShape, names: dict[str, set[str]]) -> JsonObject | None:
    """The object's keys and values; None when a field is not one of the shape's (or takes arguments).
    names: the GraphQL names selected, by type, added to."""
    built: list[tuple[str, str | JsonText | JsonObject]] = []
    selected = names.setdefault(shape.type_name, set())
    for key, (name, has_arguments, below) in selection.fields().items():
        if has_arguments:
            return None
        selected.add(name)
        inner_shape = shape.objects.get(name)
        if name == "__typename":
            built.append((key, JsonText(shape.type_name)))
        elif inner_shape is not None:
            inner = _object(below, inner_shape, names)
            if inner is None:
                return None
            built.append((key, inner))
        elif name in shape.values:
            built.append((key, shape.values[name]))
        else:
            return None
    if not 0 < len(built) <= 50:  # json_build_object's 100 arguments
        return None
    return tuple(built)


def _beyond_plain(shape: JsonShape, names: dict[str, set[str]]) -> list[str]:
    found = [shape.type_name] if not names.get(shape.type_name, set()) <= shape.plain else []
    for inner in shape.objects.values():
        found += _beyond_plain(inner, names)
    return found
