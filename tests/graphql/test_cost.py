"""The price of an operation (engine/cost.py, with the API's declarations in graphql/pricing.py): what
its fields multiply into, before it runs.

No server: the pricing function against the schema. The adversarial suite
(tests/adversarial/test_answer_size.py) sends the same shapes to a production-mode server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from graphql import parse

from chatgql.compat import strawberry as strawberry_compat
from chatgql.engine.cost import CostCache, CostLimits
from chatgql.graphql.schema import schema

REPO = Path(__file__).resolve().parents[2]
LIMITS = CostLimits()
CORE = strawberry_compat.core_schema(schema)


def price(document: str, variables: dict | None = None, operation_name: str | None = None) -> int:
    priced = CostCache(LIMITS).cost(CORE, parse(document), operation_name, variables or {})
    assert priced is not None
    return priced[0]


FIELDS = "id seq body senderId seenByCount seen seenBy(first: 1000) createdAt"
PAGE = f"messages(conversationId: $c, last: 200) {{ nodes {{ {FIELDS} }} }}"


def test_the_probes_shapes_are_over_the_default_bound():
    aliases = "query($c: ID!) { " + " ".join(f"a{i}: {PAGE}" for i in range(20)) + " }"
    assert price(aliases, {"c": "1"}) > 10 * LIMITS.max_cost
    nodes = (
        "query($ids: [ID!]!) { "
        + " ".join(f"a{i}: nodes(ids: $ids) {{ ... on Message {{ {FIELDS} }} }}" for i in range(20))
        + " }"
    )
    assert price(nodes, {"ids": [str(i) for i in range(200)]}) > 10 * LIMITS.max_cost
    subscription = (
        "subscription { messageNew { seq conversation { messages(last: 200) "
        "{ nodes { body seenBy(first: 1000) } } } } }"
    )
    assert price(subscription) > 10 * LIMITS.max_event_cost


def test_the_largest_page_there_is_fits_the_default_bound():
    assert price("query($c: ID!) { " + PAGE + " }", {"c": "1"}) <= LIMITS.max_cost


def test_a_list_multiplies_what_each_item_selects():
    def page(last: int, fields: str) -> int:
        return price(f'{{ messages(conversationId: "1", last: {last}) {{ nodes {{ {fields} }} }} }}')

    item = page(1, "seq createdAt") - page(0, "seq createdAt")
    assert page(100, "seq createdAt") - page(0, "seq createdAt") == 100 * item
    assert page(1, "seq createdAt body") - page(1, "seq createdAt") > LIMITS.bounds["body_chars"]


def test_a_body_counts_its_bound_and_seen_by_its_page():
    body = price('{ messages(conversationId: "1", last: 10) { nodes { body } } }')
    assert body > 10 * LIMITS.bounds["body_chars"]
    small = price('{ messages(conversationId: "1", last: 10) { nodes { seenBy(first: 10) } } }')
    large = price('{ messages(conversationId: "1", last: 10) { nodes { seenBy(first: 1000) } } }')
    assert large > 90 * small
    capped = price('{ messages(conversationId: "1", last: 10) { nodes { seenBy(first: 1000000) } } }')
    assert capped == large  # capped at CHATGQL_MEMBERS_PAGE_MAX, as the resolver caps it


def test_variables_are_read_and_missing_ones_count_their_cap_or_default():
    document = "query($n: Int, $c: ID!) { messages(conversationId: $c, last: $n) { nodes { body } } }"
    assert price(document, {"c": "1", "n": 200}) > 3 * price(document, {"c": "1", "n": 50})
    assert price(document, {"c": "1"}) == price(document, {"c": "1", "n": 50})  # the default page
    assert price(document, {"c": "1", "n": "many"}) == price(document, {"c": "1", "n": 200})  # the cap


def test_a_cached_price_is_for_the_variables_it_read():
    costs = CostCache(LIMITS)
    document = parse("query($n: Int!) { inbox(first: $n) { nodes { title } } }")
    small = costs.cost(CORE, document, None, {"n": 1})
    large = costs.cost(CORE, document, None, {"n": 200})
    assert small is not None and large is not None and large[0] > 100 * small[0]
    assert costs.cost(CORE, document, None, {"n": 1}) == small


def test_sync_multiplies_cursors_by_limit_and_nodes_by_ids():
    document = "query($cs: [SyncCursor!]!, $l: Int) { sync(cursors: $cs, limit: $l) { messages { body } } }"
    cursors = [{"conversationId": str(i), "afterSeq": 0} for i in range(10)]
    assert price(document, {"cs": cursors, "l": 10}) > 9.9 * price(document, {"cs": cursors[:1], "l": 10})
    # 3 cursors of 100: within CHATGQL_MAX_SYNC_MESSAGES (300) in all
    assert price(document, {"cs": cursors[:3], "l": 100}) > 9 * price(document, {"cs": cursors[:3], "l": 10})
    assert price(document, {"cs": cursors, "l": 100}) == price(document, {"cs": cursors, "l": 30})
    nodes = "query($ids: [ID!]!) { nodes(ids: $ids) { ... on Message { body } } }"
    assert price(nodes, {"ids": ["a"] * 100}) > 90 * price(nodes, {"ids": ["a"]})


def test_fragments_count_where_they_are_spread_and_introspection_costs_nothing():
    fragment = "fragment M on Message { body }"
    once = price('{ messages(conversationId: "1") { nodes { ...M } } } ' + fragment)
    twice = price(
        '{ a: messages(conversationId: "1") { nodes { ...M } } b: messages(conversationId: "1") { nodes { ...M } } } '
        + fragment
    )
    assert twice > 1.9 * once
    assert price("{ __schema { types { fields { name } } } }") < 100


def _documents_in(text: str) -> list[str]:
    """The GraphQL documents quoted in a file (balanced braces, parsing)."""
    found = []
    for match in re.finditer(r"(?:(?:query|mutation|subscription)\b[^{\"'`]*)?\{", text):
        start, depth = match.start(), 0
        for end in range(match.end() - 1, min(len(text), match.start() + 5000)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                candidate = text[start : end + 1]
                try:
                    parse(candidate)
                except Exception:  # noqa: BLE001 - not a document
                    break
                found.append(candidate)
                break
    return found


def test_every_document_of_the_docs_the_clients_and_the_planner_corpus_is_within_the_bounds():
    corpus = json.loads((REPO / "tests/graphql/plan/planner_corpus.json").read_text())
    sources = [REPO / "README.md", REPO / "tests/clients/apollo/cache.mjs", REPO / "tests/support/recipes.py"]
    sources += sorted((REPO / "docs").rglob("*.md"))
    documents = [(e["query"], e.get("variables") or {}, e.get("operationName")) for e in corpus]
    for source in sources:
        documents += [(d, {}, None) for d in _documents_in(source.read_text())]
    assert len(documents) > 200
    costs = CostCache(LIMITS)
    for query, variables, operation_name in documents:
        try:
            document = parse(query)
        except Exception:  # noqa: BLE001 - the corpus holds refused documents too
            continue
        priced = costs.cost(CORE, document, operation_name, variables)
        if priced is None:
            continue
        cost, kind = priced
        bound = LIMITS.max_event_cost if kind == "subscription" else LIMITS.max_cost
        assert cost <= bound, (cost, query[:300])
