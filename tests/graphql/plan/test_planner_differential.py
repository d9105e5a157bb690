"""The plan-once executor (chatgql.engine.plan) answers exactly as graphql-core's executor.

Every document goes through both on the same data, in this process, as the
HTTP fast path runs them: prepared.execute_accepted (graphql-core) and
Planner.execute; their answers, encoded as the server sends them, must be the
same JSON (data and errors: message, locations, path, extensions), compared
after sorting object keys. The documents:

- the corpus (tests/graphql/plan/planner_corpus.json): what the test suite's own requests
  sent, recorded once from a suite run;
- documents hypothesis draws (derandomized): test_fuzz's generator (random
  selections, aliases, inline fragments, arguments of right and wrong kinds,
  variables declared wrong or missing), and this file's, which adds named
  fragments, @skip/@include on fields, spreads and inline fragments with
  literal and variable conditions, the same field selected twice with
  different sub-selections, and bad ids inside lists (errors that propagate to
  the nearest nullable parent).

The data is test_fuzz's seed, lived in (the `lived` fixture): edits and their history, a
tombstone and a reply to it, reactions, an attachment, mentions, delivered receipts, a
markUnread rewind, private receipts, a muted, an archived and a pinned conversation, so the
fields of messages that live and of the complete read state answer something; this file's
generator gives their arguments (reactedBy's emoji, replies' pages, sync's afterChangeSeq,
inbox filters) and draws their mutations too.

Only documents that validate reach the executors, as in production. A
mutation runs reference, plan, reference: the plan's answer must equal the
second reference answer (all of chatgql's mutations but createGroup and typing answer
alike when repeated; createGroup's new ids and times, and typing's until, are masked).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from graphql import (
    GraphQLInterfaceType,
    GraphQLObjectType,
    get_named_type,
    get_operation_ast,
    parse,
    specified_rules,
    validate,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from orjson import Fragment
from starlette.requests import Request
from strawberry.http import process_result

from chatgql.engine.limits import check_document
from chatgql.engine.plan import Planner
from chatgql.engine.prepared import execute_accepted
from chatgql.graphql import ids
from chatgql.graphql.context import Context
from chatgql.graphql.schema import DEFAULT_LIMITS

from ..test_fuzz import FOREIGN_ID, MISSING_ID, OWN_IDS, SCHEMA, SETTINGS, operations, seeded  # noqa: F401

CORPUS = Path(__file__).with_name("planner_corpus.json")
RULES = tuple(specified_rules)
FUZZ_EXAMPLES = 500
OWN_EXAMPLES = 1000


class Differential:
    """Runs documents through both executors of one server and compares the answers."""

    def __init__(self, server: Any, client: Any) -> None:
        self.graphql = server.app.graphql
        self.schema = self.graphql.schema
        self.client = client
        self.planner = Planner(enabled=True)
        self.compared = 0
        self.raced = 0
        self.plan_calls = 0
        self.tokens: dict[int | None, str | None] = {}
        self.mismatches: list[str] = []

    def context(self, user: int | None) -> Context:
        if user not in self.tokens:
            self.tokens[user] = None if user is None else self.client.token(user)
        token = self.tokens[user]
        headers = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
        request = Request({"type": "http", "method": "POST", "path": "/graphql", "headers": headers})
        return Context(deps=self.graphql.deps, request=request)

    def encode(self, result: Any) -> str:
        body = json.loads(self.graphql.encode_json(process_result(result)))
        return json.dumps(body, sort_keys=True, ensure_ascii=False)

    async def outcome(self, execution: Any) -> str:
        """The encoded answer; or, when execution raises instead of answering, the exception's type
        (it did, with CancelledError, before loaders._Loader shielded shared loads: the plan must
        fail as graphql-core fails, not otherwise)."""
        try:
            async with asyncio.timeout(5):
                return self.encode(await execution)
        except TimeoutError:
            return "timed out"
        except BaseException as error:  # noqa: BLE001
            if isinstance(error, KeyboardInterrupt | SystemExit):
                raise
            return f"raised {type(error).__name__}"

    async def planned(self, document: Any, query: str, variables: Any, name: str | None, user: int | None) -> str:
        self.plan_calls += 1
        return await self.outcome(
            self.planner.execute(self.schema, document, query, variables, name, self.context(user))
        )

    async def reference(self, document: Any, variables: Any, name: str | None, user: int | None) -> str:
        return await self.outcome(execute_accepted(self.schema, document, variables, name, self.context(user)))

    async def check(self, query: str, variables: Any = None, name: str | None = None, user: int | None = 1) -> bool:
        """Compare one request; False when the document is not one the fast path would run."""
        try:
            document = parse(query, max_tokens=3000)
        except Exception:
            return False
        if check_document(document, DEFAULT_LIMITS) or validate(self.schema._schema, document, RULES):
            return False
        operation = get_operation_ast(document, name)
        if operation is None or operation.operation.value not in ("query", "mutation"):
            return False
        if not isinstance(variables, dict | None):
            return False
        mutation = operation.operation.value == "mutation"
        if mutation:
            await self.reference(document, variables, name, user)
        planned = await self.planned(document, query, variables, name, user)
        expected = await self.reference(document, variables, name, user)
        if planned != expected and mutation and ("createGroup" in query or "typing" in query):
            planned, expected = _masked(planned, document), _masked(expected, document)
        if planned != expected and not mutation:
            # Concurrent root fields that both fail race to be the error that nulls `data`: in
            # graphql-core too, which one wins depends on the database. The plan's answer must be
            # one graphql-core gives: both run again, until they agree once (or 8 times each).
            plans, references = {planned}, {expected}
            for _ in range(8):
                plans.add(await self.planned(document, query, variables, name, user))
                references.add(await self.reference(document, variables, name, user))
                if plans & references:
                    planned = expected = next(iter(plans & references))
                    self.raced += 1
                    break
        self.compared += 1
        if planned != expected:
            self.mismatches.append(
                f"query: {query}\nvariables: {variables!r}\nuser: {user}\nplan:      {planned}\nreference: {expected}"
            )
        return True

    def assert_same(self) -> None:
        assert not self.mismatches, f"{len(self.mismatches)} differences; first:\n" + self.mismatches[0]
        stats = self.planner.stats
        # Every comparison ran a plan (a fallback would compare graphql-core with itself), but
        # for graphql-core's own refusals: a null @include(if:) (compile_error), introspection.
        # node(id:)/nodes(ids:) (the Node interface) run by plan too.
        assert stats.executions + stats.variable_errors + sum(stats.fallbacks.values()) == self.plan_calls
        assert set(stats.fallbacks) <= {"introspection", "compile_error"}, stats.fallbacks
        assert sum(stats.fallbacks.values()) < self.compared / 20, stats.fallbacks


_MASKED = ("id", "createdAt", "joinedAt", "lastMessageAt", "until")


def _masked(encoded: str, document: Any = None) -> str:
    """The answer with what differs between two createGroup calls masked: those fields, under their
    names or any alias the document gives them."""
    keys = set(_MASKED)
    if document is not None:
        from graphql import FieldNode, visit
        from graphql.language import Visitor

        class Aliases(Visitor):
            def enter_field(self, node: FieldNode, *_: Any) -> None:
                if node.alias is not None and node.name.value in _MASKED:
                    keys.add(node.alias.value)

        visit(document, Aliases())

    def mask(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: "*" if k in keys else mask(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mask(v) for v in value]
        return value

    return json.dumps(mask(json.loads(encoded)), sort_keys=True, ensure_ascii=False)


def drawn(strategy: st.SearchStrategy, examples: int) -> list[Any]:
    """`examples` values of strategy, the same on every run (derandomized)."""
    found: list[Any] = []

    @settings(**SETTINGS, max_examples=examples)
    @given(strategy)
    def collect(value: Any) -> None:
        found.append(value)

    collect()
    return found


# ------------------------------------------------------------------ the seed, lived in

SEND_MORE = (
    "mutation($c: ID!, $k: UUID!, $b: String!, $r: ID, $a: [AttachmentInput!], $m: [ID!]) { sendMessage("
    "conversationId: $c, clientMsgId: $k, body: $b, replyTo: $r, attachments: $a, mentions: $m) { message { seq } } }"
)
CHANGE = {
    "edit": "mutation($c: ID!, $s: Long!, $v: String!) { editMessage(conversationId: $c, seq: $s, body: $v) { changeSeq } }",
    "delete": "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }",
    "react": "mutation($c: ID!, $s: Long!, $v: String!) { addReaction(conversationId: $c, seq: $s, emoji: $v) { changeSeq } }",
}
IMAGE = {"url": "https://files.example/a.png", "mimeType": "image/png", "name": "a.png", "sizeBytes": 2048, "width": 64}
EMOJIS = ["👍", "🎉", "❤️"]


@pytest.fixture
async def lived(seeded):  # noqa: F811
    """The seed with what messages and members live through (issues 20 and 21), so the new fields answer
    something: in conversation 1 a reply with an attachment and mentions, a reply to a message deleted
    since (its tombstone), edits, reactions of three users, a member with private receipts, the viewer's
    rewind (markUnread); in the DIRECT chat 3 an edit, a reaction and a delivered receipt; conversation
    2 muted and archived and 3 pinned by the viewer; the foreign conversation's own edits and reactions.
    Conversation 1 ends at seq 6 (5 deleted), 3 at seq 2, 2 at seq 1."""

    async def do(query: str, user: int, **variables: Any) -> dict:
        return await seeded.data(query, variables, user=user)

    async def send(cid: str, user: int, body: str, **extra: Any) -> int:
        data = await do(SEND_MORE, user, c=cid, k=str(uuid.uuid4()), b=body, **extra)
        return data["sendMessage"]["message"]["seq"]

    assert await send("1", 3, "a reply", r=ids.message_id(1, 1), a=[IMAGE], m=["1", "2"]) == 3
    assert await send("1", 2, "for you", m=["1"]) == 4
    assert await send("1", 3, "soon gone") == 5
    assert await send("1", 2, "a reply to what goes", r=ids.message_id(1, 5)) == 6
    await do(CHANGE["edit"], 1, c="1", s=2, v="hello again")
    await do(CHANGE["edit"], 1, c="1", s=2, v="hello, edited twice")
    await do(CHANGE["edit"], 2, c="1", s=4, v="for you (edited)")
    await do(CHANGE["delete"], 3, c="1", s=5)
    for user, seq, emoji in [(1, 1, 0), (2, 1, 0), (3, 1, 1), (2, 2, 2), (1, 3, 1), (3, 6, 0)]:
        await do(CHANGE["react"], user, c="1", s=seq, v=EMOJIS[emoji])
    await do(CHANGE["edit"], 2, c="3", s=1, v="hello 3, edited")
    await do(CHANGE["react"], 1, c="3", s=1, v=EMOJIS[2])
    await do(CHANGE["edit"], 7, c=FOREIGN_ID, s=1, v="FOREIGN-EDIT-zq")
    await do(CHANGE["react"], 6, c=FOREIGN_ID, s=2, v=EMOJIS[0])
    await do('mutation { markDelivered(conversationId: "3", seq: 2) { deliveredSeq } }', 2)
    await do('mutation { markRead(conversationId: "1", seq: 6) { lastReadSeq } }', 2)
    await do('mutation { markDelivered(conversationId: "1", seq: 4) { deliveredSeq } }', 3)
    await do('mutation { updateMembership(conversationId: "1", privateReceipts: true) { id } }', 3)
    await do('mutation { markRead(conversationId: "1", seq: 6) { lastReadSeq } }', 1)
    await do('mutation { markUnread(conversationId: "1", fromSeq: 3) { id } }', 1)
    await do('mutation { updateMembership(conversationId: "2", muted: true, archived: true) { id } }', 1)
    await do('mutation { updateMembership(conversationId: "3", pinned: true) { id } }', 1)
    return seeded


# ------------------------------------------------------------------ this file's generator

BOOLEAN_VARIABLES = {"yes": True, "no": False}
INBOX_FILTERS = [
    "{archived: null}",
    "{archived: true}",
    "{unreadOnly: true}",
    "{pinned: true}",
    "{pinned: false, archived: null}",
    "{muted: true, archived: null}",
    "{muted: false, unreadOnly: true}",
]
# The mutations a drawn document may run, with arguments: each answers alike when repeated (an edit to the
# same body, a reaction added again, a delete of a tombstone, a rewind to the same seq, a pin kept).
MUTATIONS = {
    "markRead": ["seq: 1", "seq: 2", "seq: 99"],
    "sendMessage": ['clientMsgId: "{uuid}", body: "hi"'],
    "editMessage": [
        'seq: 2, body: "hello, edited twice"',
        'seq: 1, body: "x"',
        'seq: 99, body: "x"',
        'seq: 2, body: ""',
    ],
    "deleteMessage": ["seq: 5", "seq: 99"],
    "addReaction": ['seq: 1, emoji: "👍"', 'seq: 5, emoji: "🎉"', 'seq: 2, emoji: ""', 'seq: 3, emoji: "🎉"'],
    "removeReaction": ['seq: 2, emoji: "🙈"', 'seq: 99, emoji: "👍"'],
    "markUnread": ["fromSeq: 3", "fromSeq: 0", "fromSeq: 99"],
    "markDelivered": ["seq: 2", "seq: 99", "seq: -1"],
    "updateMembership": ["muted: true", "pinned: true", "archived: true, keepArchived: true", "muted: null"],
}
# Global ids for node(id:)/nodes(ids:) on the seeded data: visible ones of every type, another
# user's viewer, a foreign conversation's objects, nothing at all, and malformed ones.
NODE_IDS = [
    *OWN_IDS,
    ids.message_id(1, 1),
    ids.message_id(3, 2),
    ids.message_id(1, 99),
    ids.member_id(1, 2),
    ids.member_id(2, 4),
    ids.member_id(1, 9),
    ids.viewer_id(1),
    ids.viewer_id(2),
    FOREIGN_ID,
    ids.message_id(4, 1),
    ids.member_id(4, 6),
    MISSING_ID,
    "x",
    "",
]


class _Doc:
    """Draws from a random.Random that hypothesis seeds (one draw per document: many small
    hypothesis draws made generation take most of the test's time)."""

    def __init__(self, rnd: Any) -> None:
        self.rnd = rnd
        self.used: dict[str, str] = {}  # variable -> declared type
        self.fragments: list[str] = []
        self.budget = 30

    def condition(self) -> str:
        rnd = self.rnd
        kind = rnd.choice(["skip", "include"])
        choice = rnd.choice(["yes", "no", "maybe", "true", "false"])
        if choice in ("true", "false"):
            return f" @{kind}(if: {choice})"
        self.used[choice] = "Boolean = true" if choice == "maybe" else "Boolean!"
        return f" @{kind}(if: ${choice})"

    def directive(self) -> str:
        return self.condition() if self.rnd.randint(0, 4) == 0 else ""

    def id_value(self, name: str) -> str:
        rnd = self.rnd
        if rnd.randint(0, 3) == 0:
            self.used["cid"] = "ID!"
            return "$cid"
        if name in ("userId",):
            return json.dumps(rnd.choice(["2", "3", "5"]))
        return json.dumps(rnd.choice(OWN_IDS * 3 + [FOREIGN_ID, MISSING_ID, "0", "x"]))

    def arguments(self, type_name: str, field_name: str) -> str:
        rnd = self.rnd
        if type_name == "Query" and field_name == "conversation":  # the events' conversation takes none
            return f"(id: {self.id_value('id')})"
        if type_name == "Query" and field_name == "messages":
            extra = rnd.choice(["", ", first: 2", ", last: 1", ', after: "1"', ", first: 0", ", first: $first"])
            if "$first" in extra:
                self.used["first"] = "Int"
            return f"(conversationId: {self.id_value('conversationId')}{extra})"
        if field_name == "messages":
            return rnd.choice(["", "(first: 2)", "(last: 1)", '(after: "1", first: 1)', "(first: -1)"])
        if field_name == "inbox":
            choice = rnd.choice(
                [
                    "",
                    "(first: 2)",
                    "(first: 50)",
                    "(first: $first)",
                    '(after: "bad")',
                    *(f"(filter: {f})" for f in INBOX_FILTERS),
                ]
            )
            if "$first" in choice:
                self.used["first"] = "Int"
            return choice
        if type_name == "Query" and field_name == "node":
            if rnd.randint(0, 3) == 0:
                self.used["nid"] = "ID!"
                return "(id: $nid)"
            return f"(id: {json.dumps(rnd.choice(NODE_IDS))})"
        if type_name == "Query" and field_name == "nodes":
            if rnd.randint(0, 3) == 0:
                self.used["nids"] = "[ID!]!"
                return "(ids: $nids)"
            return f"(ids: {json.dumps(rnd.choices(NODE_IDS, k=rnd.randint(0, 5)))})"
        if field_name in ("seenBy", "members"):
            return rnd.choice(["", "(first: 1)", "(first: 0)", "(first: -1)", "(first: null)", '(after: "2")'])
        if field_name == "reactedBy":
            emoji = json.dumps(rnd.choice([*EMOJIS, "", "x" * 40]), ensure_ascii=rnd.random() < 0.5)
            more = rnd.choice(["", ", first: 1", ", first: 0", ', after: "1"', ', after: "x"'])
            return f"(emoji: {emoji}{more})"
        if field_name == "replies":
            return rnd.choice(
                ["", "(first: 1)", '(after: "3")', '(first: 2, after: "0")', "(first: -1)", '(after: "x")']
            )
        if field_name == "sync":
            cursors = rnd.choices(OWN_IDS + [FOREIGN_ID, MISSING_ID], k=rnd.randint(0, 3))
            items = ", ".join(
                f'{{conversationId: "{c}", afterSeq: {rnd.randint(0, 2)}'
                + rnd.choice(
                    [
                        "",
                        "",
                        ", afterChangeSeq: 0",
                        ", afterChangeSeq: 2",
                        ", afterChangeSeq: -1",
                        ", afterChangeSeq: null",
                    ]
                )
                + "}"
                for c in cursors
            )
            return f"(cursors: [{items}]{rnd.choice(['', ', limit: 1', ', limit: 0'])})"
        return ""

    def selection(self, type_: GraphQLObjectType, depth: int) -> str:
        rnd = self.rnd
        names = rnd.choices(sorted(type_.fields), k=rnd.randint(1, 4))  # repeats: merging
        parts: list[str] = []
        for name in names:
            if self.budget <= 0:
                break
            self.budget -= 1
            field = type_.fields[name]
            target = get_named_type(field.type)
            alias = rnd.choice([""] * 6 + ["a: ", "b: "])
            head = f"{alias}{name}{self.arguments(type_.name, name)}{self.directive()}"
            if isinstance(target, GraphQLObjectType):
                if depth >= 4:
                    continue
                head += f" {{ {self.selection(target, depth + 1)} }}"
            elif isinstance(target, GraphQLInterfaceType):
                if depth >= 4:
                    continue
                head += f" {{ {self.interface_selection(target, depth + 1)} }}"
            parts.append(head)
        wrap = rnd.randint(0, 7)
        if wrap == 0:
            parts.append(f"... on {type_.name}{self.directive()} {{ {self.selection(type_, depth + 1)} }}")
        elif wrap == 1:
            parts.append(f"...{self.directive()} {{ {self.selection(type_, depth + 1)} }}")
        elif wrap == 2 and depth < 4:
            name = f"F{len(self.fragments)}"
            self.fragments.append("")  # reserve the name (a fragment may spread others)
            self.fragments[int(name[1:])] = f"fragment {name} on {type_.name} {{ {self.selection(type_, depth + 1)} }}"
            parts.append(f"...{name}{self.directive()}")
        elif wrap == 3:
            parts.append("__typename")
        return " ".join(parts) or "__typename"

    def interface_selection(self, interface: GraphQLInterfaceType, depth: int) -> str:
        """The interface's own fields, __typename, and inline fragments or named fragments on
        some of its object types (and on the interface), each with its own directives."""
        rnd = self.rnd
        parts = rnd.sample(["id", "__typename", "a: id", "id"], k=rnd.randint(0, 2))
        possible = sorted(SCHEMA.get_possible_types(interface), key=lambda t: t.name)
        for object_type in rnd.sample(possible, k=rnd.randint(0, len(possible))):
            if rnd.randint(0, 3) == 0 and depth < 4:
                name = f"F{len(self.fragments)}"
                self.fragments.append("")
                body = self.selection(object_type, depth + 1)
                self.fragments[int(name[1:])] = f"fragment {name} on {object_type.name} {{ {body} }}"
                parts.append(f"...{name}{self.directive()}")
            else:
                parts.append(f"... on {object_type.name}{self.directive()} {{ {self.selection(object_type, depth)} }}")
        if rnd.randint(0, 4) == 0:
            parts.append(f"... on {interface.name}{self.directive()} {{ id }}")
        return " ".join(parts) or "__typename"


@st.composite
def planner_documents(draw: Any) -> tuple[str, dict]:
    rnd = draw(st.randoms(use_true_random=True))
    doc = _Doc(rnd)
    if rnd.randint(0, 4) == 0:
        mutation = rnd.choice(sorted(MUTATIONS))
        cid = doc.id_value("conversationId")
        args = f"conversationId: {cid}, " + rnd.choice(MUTATIONS[mutation]).replace(
            "{uuid}", str(uuid.UUID(int=rnd.randint(1, 50)))
        )
        field = SCHEMA.mutation_type.fields[mutation]
        body = f"{mutation}({args}) {{ {doc.selection(get_named_type(field.type), 1)} }}"
        kind = "mutation"
    else:
        body = doc.selection(SCHEMA.query_type, 0)
        kind = "query"
    variables: dict[str, Any] = {}
    for name in doc.used:
        value: Any
        if name in BOOLEAN_VARIABLES:
            value = BOOLEAN_VARIABLES[name]
        elif name == "maybe":
            value = rnd.choice([True, False, None, "absent"])
        elif name == "cid":
            value = rnd.choice(OWN_IDS * 2 + [FOREIGN_ID, MISSING_ID])
        elif name == "nid":
            value = rnd.choice(NODE_IDS)
        elif name == "nids":
            value = rnd.choices(NODE_IDS, k=rnd.randint(0, 4))
        else:
            value = rnd.choice([1, 2, None, "absent"])
        fault = rnd.randint(0, 15)
        if fault == 0:
            value = "absent"  # a missing non-null variable
        elif fault == 1:
            value = rnd.choice(["x", 1.5, [1], {"a": 1}])  # wrong type
        if value != "absent":
            variables[name] = value
    header = kind
    if doc.used:
        header += "(" + ", ".join(f"${n}: {t}" for n, t in doc.used.items()) + ")"
    document = " ".join([f"{header} {{ {body} }}", *doc.fragments])
    return document, variables


# ------------------------------------------------------------------ the tests


def corpus() -> list[dict]:
    return json.loads(CORPUS.read_text())


@pytest.mark.slow
async def test_every_document_the_suite_sends_answers_alike_by_plan(server, lived):
    differential = Differential(server, lived)
    ran = 0
    for entry in corpus():
        for user in (1, None):
            ran += await differential.check(entry["query"], entry.get("variables"), entry.get("operationName"), user)
    assert ran > 200  # the corpus is there and its documents are valid
    differential.assert_same()


@pytest.mark.slow
async def test_generated_documents_answer_alike_by_plan(server, lived):
    differential = Differential(server, lived)
    ran = 0
    for document, variables in drawn(planner_documents(), OWN_EXAMPLES):
        ran += await differential.check(document, variables)
    for built in drawn(operations(), FUZZ_EXAMPLES):
        ran += await differential.check(built.document, built.variables)
    assert ran > 500, ran  # many drawn documents are valid: both executors ran them
    differential.assert_same()


async def test_a_plan_built_for_one_condition_is_not_used_for_another(server, lived):
    differential = Differential(server, lived)
    query = 'query($on: Boolean!) { viewer { userId } conversation(id: "1") @include(if: $on) { title } }'
    for on in (True, False, True, False):
        assert await differential.check(query, {"on": on})
    differential.assert_same()
    assert differential.planner.stats.built == 2


# node(id:)/nodes(ids:): the documents of tests/graphql/test_nodes.py, and what can go wrong under an
# interface (a non-null field's error nulling the node, more than 200 ids, fragments on Node).
NODE_DOCUMENTS = [
    "query($id: ID!) { node(id: $id) { __typename id ... on Conversation { title lastSeq }"
    " ... on Message { conversationId seq body } ... on Member { userId role lastReadSeq }"
    " ... on Viewer { userId totalUnread } } }",
    "query($i: [ID!]!) { nodes(ids: $i) { __typename id ... on Conversation { lastSeq }"
    " ... on Message { body } ... on Member { userId role joinedAt } } }",
    "query($i: [ID!]!) { nodes(ids: $i) { id } }",
    'query($i: [ID!]!) { a: nodes(ids: $i) { ...N } b: node(id: "1") { ...N } } fragment N on Node { id'
    " __typename ... on Conversation { messages(first: 1) { nodes { id seenBy(first: -1) } } } }",
    "query($id: ID!) { node(id: $id) { ... on Message { seenBy(first: -1) seen } ... on Node { id } } }",
    "query($i: [ID!]!) { nodes(ids: $i) { ... on Conversation { members { id role } } } }",
]


async def test_node_and_nodes_answer_alike_by_plan(server, lived):
    differential = Differential(server, lived)
    many = [NODE_IDS[i % len(NODE_IDS)] for i in range(201)]
    for query in NODE_DOCUMENTS:
        for node_id in NODE_IDS:
            variables = {"id": node_id, "i": [node_id, *NODE_IDS[:3]]}
            assert await differential.check(query, {k: v for k, v in variables.items() if f"${k}" in query}, user=1)
        if "$i" in query:
            assert await differential.check(query, {"i": many}, user=1)
            assert await differential.check(query, {"i": NODE_IDS}, user=None)
    differential.assert_same()
    assert not differential.planner.stats.fallbacks, differential.planner.stats.fallbacks


# The inbox page's nodes as PostgreSQL builds them (engine/prebuilt.py): the documents it builds, each
# with what a plan collects of a selection (aliases, fragments, @include, repeated fields, filters, a
# second page), and documents it must leave to the ordinary way (True: prebuilt).
INBOX = (
    "query($on: Boolean!, $after: String) { inbox(first: 3, after: $after%s) { t: __typename @include(if: $on) %s } }"
)
CONVERSATION_FIELDS = (
    "__typename id type title lastSeq lastMessageAt createdAt lastReadSeq unreadCount pinnedAt pinned"
    " muted mutedUntil archived keptArchived lastChangeSeq privateReceipts"
)
MESSAGE_FIELDS = (
    "__typename id conversationId seq senderId clientMsgId body createdAt"
    " editedAt deletedAt deletedBy replyCount lastReplyAt"
)
PAGE_INFO = "pageInfo { hasNextPage hasPreviousPage startCursor endCursor }"
PREBUILT_INBOXES = [
    ("", f"nodes {{ id title unreadCount lastMessage {{ seq senderId body createdAt }} }} {PAGE_INFO}", True),
    (
        ", filter: {archived: null}",
        f"__typename nodes {{ {CONVERSATION_FIELDS} lastMessage {{ {MESSAGE_FIELDS} }} }}",
        True,
    ),
    ("", "nodes { t: title ...C m: lastMessage @include(if: $on) { b: body ... on Message { seq } } id }", True),
    (
        ", filter: {pinned: true}",
        "nodes { ... on Node { id } lastMessage { id ... on Node { id } } lastReadSeq }",
        True,
    ),
    (", filter: {muted: true, archived: null}", "nodes { muted mutedUntil archived keptArchived }", True),
    (
        ", filter: {unreadOnly: true}",
        "nodes { unreadCount a: lastMessage { body } b: lastMessage { deletedAt } }",
        True,
    ),
    ("", "nodes { id } pageInfo { endCursor } nodes { title }", True),
    ("", "nodes { id memberCount }", False),
    ("", "edges { cursor node { id __typename lastMessage { body } } } pageInfo { endCursor hasNextPage }", True),
    ("", "edges { __typename cursor n: node { ...C } } nodes { title lastMessage { seq } }", True),
    ("", "nodes { id } edges { cursor }", True),
    ("", "edges { cursor }", False),
    ("", "edges { cursor node { id memberCount } } nodes { id }", False),
    ("", "a: nodes { id } b: nodes { title }", False),
    ("", "nodes { lastMessage { body reactions { emoji count } } }", False),
    ("", "nodes { unreadMentions }", False),
    ("", PAGE_INFO, False),
]
TRICKY_BODY = 'quote " back \\ slash\nnew line\ttab \x01 control, 😀 emoji, \u2028 line separator, </script>'


async def test_inbox_nodes_prebuilt_by_postgresql_answer_alike(server, lived):
    # The edge cases of the JSON PostgreSQL writes: a body of characters JSON escapes, timestamps on a
    # whole second (isoformat leaves the microseconds out), a deleted last message (a tombstone), a
    # conversation without messages (lastMessage null), edits (conversation 1), settings (2 and 3).
    async def do(query: str, user: int, **variables: Any) -> dict:
        return await lived.data(query, variables, user=user)

    direct = "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }"
    tricky, tombstone, empty = [(await do(direct, 1, u=u))["createDirectConversation"]["id"] for u in ("8", "9", "10")]
    for cid, body in [(tricky, "first"), (tricky, TRICKY_BODY), (tombstone, "kept"), (tombstone, "gone")]:
        await do(SEND_MORE, 1, c=cid, k=str(uuid.uuid4()), b=body)
    await do(CHANGE["delete"], 1, c=tombstone, s=2)
    async with server.runtime.deps.database.connection() as conn:
        await conn.execute(
            "UPDATE message SET created_at = date_trunc('second', created_at) WHERE conversation_id = $1", int(tricky)
        )
        await conn.execute(
            "UPDATE conversation SET created_at = date_trunc('second', created_at),"
            " last_message_at = date_trunc('second', last_message_at) WHERE id = ANY($1::bigint[])",
            [int(tricky), int(empty)],
        )
    differential = Differential(server, lived)
    for arguments, selection, prebuilt in PREBUILT_INBOXES:
        query = INBOX % (arguments, selection)
        if "...C" in selection:
            query += " fragment C on Conversation { id u: unreadCount id createdAt }"
        before = differential.planner.stats.prebuilt
        for user in (1, None):
            after = None
            for _ in range(3):  # the pages of the viewer's conversations, by endCursor
                assert await differential.check(query, {"on": True, "after": after}, user=user)
                assert await differential.check(query, {"on": False, "after": after}, user=user)
                page = await do(INBOX % (arguments, "pageInfo { endCursor hasNextPage }"), 1, on=True, after=after)
                if not page["inbox"]["pageInfo"]["hasNextPage"]:
                    break
                after = page["inbox"]["pageInfo"]["endCursor"]
        # a plan per value of $on, both prebuilt or neither
        assert differential.planner.stats.prebuilt - before == (2 if prebuilt else 0), (selection, prebuilt)
    differential.assert_same()
    answer = await do("{ inbox(first: 20) { nodes { id lastMessage { body deletedAt createdAt } createdAt } } }", 1)
    shown = {node["id"]: node for node in answer["inbox"]["nodes"]}
    assert shown[tricky]["lastMessage"]["body"] == TRICKY_BODY
    assert "." not in shown[tricky]["lastMessage"]["createdAt"] and "." not in shown[tricky]["createdAt"]
    assert shown[tombstone]["lastMessage"]["body"] == "" and shown[tombstone]["lastMessage"]["deletedAt"]
    assert shown[empty]["lastMessage"] is None


def test_an_answer_with_prebuilt_nodes_encodes_where_orjson_refuses_the_rest(server):
    # orjson refuses a lone surrogate; the standard library's fallback takes the Fragment as its JSON
    body = {"data": {"inbox": {"nodes": [Fragment('{"id":"1","title":"t"}')]}}, "x": "\ud800"}
    assert json.loads(server.app.graphql.encode_json(body))["data"] == {"inbox": {"nodes": [{"id": "1", "title": "t"}]}}
