"""The public contract: schema.graphql is current and contains contract.graphql; errors stay in the contract.

- schema.graphql at the repository root is exactly what the code generates;
- every type, field, argument (type and default) and enum value of
  shared/api/contract.graphql is in schema.graphql, unchanged;
- every error answer carries one of the contract's codes, never a 5xx, never
  SQL, a stack trace or a driver's name.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import jwt
import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLSchema,
    GraphQLUnionType,
    Undefined,
    ast_from_value,
    build_schema,
    print_ast,
)

from ..conftest import REPO, error_code

try:
    from graphql.utilities import get_default_value_ast
except ImportError:  # graphql-core before 3.3
    get_default_value_ast = None

CONTRACT_CODES = {"UNAUTHENTICATED", "NOT_FOUND", "FORBIDDEN", "BAD_USER_INPUT", "CONFLICT", "LIMIT_EXCEEDED"}


def _shared_contract() -> Path | None:
    """../shared/api/contract.graphql, the public contract, when this checkout sits next to it."""
    for parent in [REPO, *REPO.parents]:
        candidate = parent / "shared" / "api" / "contract.graphql"
        if candidate.is_file():
            return candidate
    return None


# api/contract.graphql is the repository's copy of the contract, so that a clone
# anywhere still checks it; where the shared original is reachable, the copy
# must equal it (test below).
VENDORED_CONTRACT = REPO / "api" / "contract.graphql"


def _contract_path() -> Path:
    return _shared_contract() or VENDORED_CONTRACT


CONTRACT = _contract_path()
SCHEMA_FILE = REPO / "schema.graphql"


# ---------------------------------------------------------------- schema.graphql is generated from the code


def test_schema_graphql_at_the_repo_root_is_what_the_code_generates():
    import strawberry.printer

    from chatgql.graphql.schema import schema

    generated = strawberry.printer.print_schema(schema) + "\n"
    assert SCHEMA_FILE.read_text() == generated, (
        "schema.graphql is stale: regenerate it with `chatgql export-schema -o schema.graphql`"
    )


# ---------------------------------------------------------------- schema.graphql contains the contract


def _kind(named_type) -> str:
    for cls, name in (
        (GraphQLObjectType, "type"),
        (GraphQLInputObjectType, "input"),
        (GraphQLEnumType, "enum"),
        (GraphQLScalarType, "scalar"),
        (GraphQLInterfaceType, "interface"),
        (GraphQLUnionType, "union"),
    ):
        if isinstance(named_type, cls):
            return name
    raise AssertionError(f"unexpected kind of {named_type}")


def _default(value_holder) -> str | None:
    """The printed default of an argument or input field; None when it has none."""
    if get_default_value_ast is not None:  # graphql-core 3.3 keeps SDL defaults as literals
        node = get_default_value_ast(value_holder)
        return None if node is None else print_ast(node)
    if value_holder.default_value is Undefined:
        return None
    return print_ast(ast_from_value(value_holder.default_value, value_holder.type))


def _is_user_type(name: str) -> bool:
    return not name.startswith("__")


def contract_differences(contract: GraphQLSchema, schema: GraphQLSchema) -> list[str]:
    """Everything of the contract that schema lacks or has changed (empty: schema is a superset)."""
    problems: list[str] = []
    for name, wanted in contract.type_map.items():
        if not _is_user_type(name):
            continue
        have = schema.type_map.get(name)
        if have is None:
            problems.append(f"{_kind(wanted)} {name} is missing")
            continue
        if _kind(have) != _kind(wanted):
            problems.append(f"{name} is a {_kind(have)}, the contract says {_kind(wanted)}")
            continue
        if isinstance(wanted, GraphQLEnumType):
            for value in wanted.values:
                if value not in have.values:
                    problems.append(f"enum value {name}.{value} is missing")
        if isinstance(wanted, GraphQLUnionType):
            missing = {t.name for t in wanted.types} - {t.name for t in have.types}
            if missing:
                problems.append(f"union {name} lacks {sorted(missing)}")
        if isinstance(wanted, (GraphQLObjectType, GraphQLInterfaceType)):
            missing = {i.name for i in wanted.interfaces} - {i.name for i in have.interfaces}
            if missing:
                problems.append(f"{name} does not implement {sorted(missing)}")
        if isinstance(wanted, (GraphQLObjectType, GraphQLInterfaceType, GraphQLInputObjectType)):
            for field_name, field in wanted.fields.items():
                where = f"{name}.{field_name}"
                other = have.fields.get(field_name)
                if other is None:
                    problems.append(f"field {where} is missing")
                    continue
                if str(other.type) != str(field.type):
                    problems.append(f"field {where} is {other.type}, the contract says {field.type}")
                if isinstance(wanted, GraphQLInputObjectType):
                    if _default(other) != _default(field):
                        problems.append(
                            f"field {where} has default {_default(other)}, the contract says {_default(field)}"
                        )
                    continue
                for arg_name, arg in field.args.items():
                    other_arg = other.args.get(arg_name)
                    if other_arg is None:
                        problems.append(f"argument {where}({arg_name}) is missing")
                        continue
                    if str(other_arg.type) != str(arg.type):
                        problems.append(
                            f"argument {where}({arg_name}) is {other_arg.type}, the contract says {arg.type}"
                        )
                    if _default(other_arg) != _default(arg):
                        problems.append(
                            f"argument {where}({arg_name}) has default {_default(other_arg)}, "
                            f"the contract says {_default(arg)}"
                        )
    for operation in ("query_type", "mutation_type", "subscription_type"):
        wanted_root, have_root = getattr(contract, operation), getattr(schema, operation)
        if wanted_root is not None and (have_root is None or have_root.name != wanted_root.name):
            problems.append(f"the {operation} is not {wanted_root.name}")
    return problems


def test_schema_graphql_contains_every_type_field_argument_default_and_enum_value_of_the_contract():
    contract = build_schema(CONTRACT.read_text())
    schema = build_schema(SCHEMA_FILE.read_text())
    assert contract_differences(contract, schema) == []


def test_the_contract_itself_lists_what_the_check_walks():
    """Guard against a vacuous pass: the contract parses into the types it is known to hold."""
    contract = build_schema(CONTRACT.read_text())
    names = {name for name in contract.type_map if _is_user_type(name)}
    assert {"Query", "Mutation", "Subscription", "Message", "MessageConnection", "SyncCursor", "Long"} <= names
    assert _default(contract.query_type.fields["inbox"].args["first"]) == "20"
    assert _default(contract.query_type.fields["inbox"].args["after"]) is None
    assert _default(contract.type_map["Message"].fields["seenBy"].args["first"]) == "100"


CHECKER_BASE = """
scalar Long
enum Kind { A B }
input In { x: Int! y: String = "y" }
type Thing { id: ID! n(first: Int = 5, after: String): [Long!]! kind: Kind }
type Query { thing(id: ID!, in: In): Thing }
"""


@pytest.mark.parametrize(
    ("changed", "complaint"),
    [
        ("type Thing { id: ID n(first: Int = 5, after: String): [Long!]! kind: Kind }", "Thing.id is ID"),
        ("type Thing { id: ID! n(first: Int = 5, after: String): [Long]! kind: Kind }", "Thing.n is [Long]!"),
        ("type Thing { id: ID! n(first: Int, after: String): [Long!]! kind: Kind }", "has default None"),
        ("type Thing { id: ID! n(first: Int = 6, after: String): [Long!]! kind: Kind }", "has default 6"),
        ('type Thing { id: ID! n(first: Int = 5, after: String = "0"): [Long!]! kind: Kind }', 'has default "0"'),
        ("type Thing { id: ID! n(first: Int = 5, after: String = null): [Long!]! kind: Kind }", "has default null"),
        ("type Thing { id: ID! n(first: Int = 5): [Long!]! kind: Kind }", "Thing.n(after) is missing"),
        ("type Thing { id: ID! n(first: Int! = 5, after: String): [Long!]! kind: Kind }", "Thing.n(first) is Int!"),
        ("type Thing { id: ID! n(first: Int = 5, after: String): [Long!]! }", "Thing.kind is missing"),
        ("enum Kind { A }", "Kind.B is missing"),
        ("enum Long { X }", "Long is a enum"),
        ('input In { x: Int y: String = "y" }', "In.x is Int"),
        ('input In { x: Int! y: String = "z" }', 'In.y has default "z"'),
        ("input In { x: Int! y: String }", "In.y has default None"),
    ],
)
def test_the_contract_check_reports_every_kind_of_breaking_change(changed, complaint):
    name = changed.split()[1]
    lines = [line for line in CHECKER_BASE.strip().splitlines() if line.split()[1] != name]
    problems = contract_differences(build_schema(CHECKER_BASE), build_schema("\n".join(lines + [changed])))
    assert any(complaint in problem for problem in problems), problems


def test_the_contract_check_accepts_additions():
    added = (
        CHECKER_BASE.replace("kind: Kind }", "kind: Kind extra(z: Int = 1): Int }")
        .replace("enum Kind { A B }", "enum Kind { A B C }")
        .replace("after: String)", "after: String, more: Int)")
        + "\ntype Extra { a: Int }"
    )
    assert contract_differences(build_schema(CHECKER_BASE), build_schema(added)) == []


# ---------------------------------------------------------------- errors stay in the contract

LEAKS_EXACT = ("SELECT", "INSERT")
LEAKS_ANY_CASE = ("traceback", "sqlalchemy", "asyncpg")

VIEWER = "{ viewer { userId totalUnread } }"
MARK_READ_VAR = "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq } }"
SEND_VAR = (
    "mutation($c: ID!, $k: UUID!, $b: String!) {"
    " sendMessage(conversationId: $c, clientMsgId: $k, body: $b) { message { seq } } }"
)


def _token(claims: dict, secret: str) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


def assert_contract_errors(response, expected: str | None = None) -> list[dict]:
    """The answer is GraphQL errors with contract codes (and `expected` when given), nothing internal."""
    assert response.status_code < 500, (response.status_code, response.text)
    body = response.json()
    errors = body.get("errors")
    assert errors, body
    for error in errors:
        assert error.get("extensions", {}).get("code") in CONTRACT_CODES, error
        if expected is not None:
            assert error_code(error) == expected, error
    for word in LEAKS_EXACT:
        assert word not in response.text, response.text
    for word in LEAKS_ANY_CASE:
        assert word not in response.text.lower(), response.text
    return errors


@pytest.fixture
async def conversation(client) -> str:
    data = await client.data('mutation { createGroup(title: "contract", memberIds: ["2"]) { id } }', user=1)
    return data["createGroup"]["id"]


def _request_cases(cid: str) -> dict[str, tuple[str, dict, str]]:
    """name -> (document, variables, expected code), all sent as user 1."""
    k = str(uuid.uuid4())
    return {
        "syntax-error-unclosed": ("{ viewer { userId ", {}, "BAD_USER_INPUT"),
        "syntax-error-garbage": ("}}} not graphql", {}, "BAD_USER_INPUT"),
        "syntax-error-bad-argument": ("mutation { sendMessage( }", {}, "BAD_USER_INPUT"),
        "empty-document": (" ", {}, "BAD_USER_INPUT"),
        "unknown-field": ("{ viewer { userId password } }", {}, "BAD_USER_INPUT"),
        "unknown-root-field": ("{ users { id } }", {}, "BAD_USER_INPUT"),
        "unknown-argument": ("{ inbox(orderBy: 1) { nodes { id } } }", {}, "BAD_USER_INPUT"),
        "missing-selection": ("{ inbox }", {}, "BAD_USER_INPUT"),
        "wrong-variable-type": ("query($n: Int) { inbox(first: $n) { nodes { id } } }", {"n": "ten"}, "BAD_USER_INPUT"),
        "variable-declared-with-wrong-type": (
            "query($n: String) { inbox(first: $n) { nodes { id } } }",
            {"n": "5"},
            "BAD_USER_INPUT",
        ),
        "missing-required-variable": ("query($c: ID!) { conversation(id: $c) { id } }", {}, "BAD_USER_INPUT"),
        "null-for-required-variable": ("query($c: ID!) { conversation(id: $c) { id } }", {"c": None}, "BAD_USER_INPUT"),
        "int-variable-beyond-32-bits": (
            "query($n: Int) { inbox(first: $n) { nodes { id } } }",
            {"n": 2**40},
            "BAD_USER_INPUT",
        ),
        "long-variable-above-int64": (MARK_READ_VAR, {"c": cid, "s": 2**63}, "BAD_USER_INPUT"),
        "long-variable-below-int64": (MARK_READ_VAR, {"c": cid, "s": -(2**63) - 1}, "BAD_USER_INPUT"),
        "long-variable-far-above-int64": (MARK_READ_VAR, {"c": cid, "s": 10**30}, "BAD_USER_INPUT"),
        "long-literal-above-int64": (
            f'mutation {{ markRead(conversationId: "{cid}", seq: 9223372036854775808) {{ lastReadSeq }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "long-variable-float": (MARK_READ_VAR, {"c": cid, "s": 1.5}, "BAD_USER_INPUT"),
        "long-variable-whole-float": (MARK_READ_VAR, {"c": cid, "s": 3.0}, "BAD_USER_INPUT"),
        "long-variable-bool": (MARK_READ_VAR, {"c": cid, "s": True}, "BAD_USER_INPUT"),
        "long-variable-text": (MARK_READ_VAR, {"c": cid, "s": "abc"}, "BAD_USER_INPUT"),
        "long-variable-object": (MARK_READ_VAR, {"c": cid, "s": {"n": 1}}, "BAD_USER_INPUT"),
        "long-literal-float": (
            f'mutation {{ markRead(conversationId: "{cid}", seq: 1.5) {{ lastReadSeq }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "long-literal-bool": (
            f'mutation {{ markRead(conversationId: "{cid}", seq: true) {{ lastReadSeq }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "long-literal-text": (
            f'mutation {{ markRead(conversationId: "{cid}", seq: "abc") {{ lastReadSeq }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "uuid-variable-malformed": (SEND_VAR, {"c": cid, "k": "not-a-uuid", "b": "x"}, "BAD_USER_INPUT"),
        "uuid-variable-too-short": (SEND_VAR, {"c": cid, "k": k[:-1], "b": "x"}, "BAD_USER_INPUT"),
        "uuid-variable-number": (SEND_VAR, {"c": cid, "k": 12, "b": "x"}, "BAD_USER_INPUT"),
        "uuid-literal-malformed": (
            f'mutation {{ sendMessage(conversationId: "{cid}", clientMsgId: "zzz", body: "x") {{ duplicate }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "id-not-decimal": ('{ conversation(id: "abc") { id } }', {}, "BAD_USER_INPUT"),
        "id-beyond-int64": ('{ conversation(id: "99999999999999999999") { id } }', {}, "BAD_USER_INPUT"),
        "negative-seq": (MARK_READ_VAR, {"c": cid, "s": -1}, "BAD_USER_INPUT"),
        # read state (docs/guide/read-state.md): the bad inputs
        "mark-unread-before-1": (
            f'mutation {{ markUnread(conversationId: "{cid}", fromSeq: 0) {{ id }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "mark-unread-beyond-last-seq": (
            f'mutation {{ markUnread(conversationId: "{cid}", fromSeq: 99) {{ id }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "mention-of-a-non-member": (
            'mutation($c: ID!, $k: UUID!) { sendMessage(conversationId: $c, clientMsgId: $k, body: "x",'
            ' mentions: ["777"]) { duplicate } }',
            {"c": cid, "k": k},
            "BAD_USER_INPUT",
        ),
        "typing-where-not-a-member": ('mutation { typing(conversationId: "987654") { sent } }', {}, "NOT_FOUND"),
        "owner-demoting-themselves": (
            f'mutation {{ setMemberRole(conversationId: "{cid}", userId: "1", role: ADMIN) {{ role }} }}',
            {},
            "BAD_USER_INPUT",  # the owner demoting themselves (an ADMIN doing it: FORBIDDEN, test_groups.py)
        ),
        # moderation (docs/guide/moderation.md)
        "ban-until-in-the-past": (
            f'mutation {{ banMember(conversationId: "{cid}", userId: "2", until: "2000-01-01T00:00:00Z") {{ userId }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "ban-until-not-a-time": (
            f'mutation {{ banMember(conversationId: "{cid}", userId: "2", until: "tomorrow") {{ userId }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "ban-oneself": (
            f'mutation {{ banMember(conversationId: "{cid}", userId: "1") {{ userId }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "unban-nobody-banned": (
            f'mutation {{ unbanMember(conversationId: "{cid}", userId: "2") {{ userId }} }}',
            {},
            "NOT_FOUND",
        ),
        "slow-mode-out-of-range": (
            f'mutation {{ setSlowMode(conversationId: "{cid}", seconds: 100000) {{ id }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "bans-negative-first": (
            f'{{ conversation(id: "{cid}") {{ bans(first: -1) {{ userId }} }} }}',
            {},
            "BAD_USER_INPUT",
        ),
        "muted-until-in-the-past": (
            f'mutation {{ updateMembership(conversationId: "{cid}", mutedUntil: "2000-01-01T00:00:00Z") {{ id }} }}',
            {},
            "BAD_USER_INPUT",
        ),
    }


REQUEST_CASE_NAMES = list(_request_cases("1"))


@pytest.mark.parametrize("case", REQUEST_CASE_NAMES)
async def test_bad_requests_answer_with_a_contract_code_and_nothing_internal(client, conversation, case):
    document, variables, expected = _request_cases(conversation)[case]
    response = await client.raw(document, variables, user=1)
    assert_contract_errors(response, expected)
    # Nothing was written by a refused request.
    data = await client.data(
        "query($c: ID!) { conversation(id: $c) { lastSeq lastReadSeq } }", {"c": conversation}, user=1
    )
    assert data["conversation"] == {"lastSeq": 0, "lastReadSeq": 0}


def _auth_cases(secret: str) -> dict[str, dict[str, str]]:
    now = int(time.time())
    later = now + 3600
    return {
        "missing-token": {},
        "empty-header": {"authorization": ""},
        "garbage-token": {"authorization": "Bearer garbage"},
        "bearer-without-token": {"authorization": "Bearer"},
        "basic-scheme": {"authorization": "Basic dXNlcjpwYXNz"},
        "token-without-scheme": {"authorization": _token({"sub": "7", "exp": later}, secret)},
        "signed-with-another-secret": {
            "authorization": "Bearer " + _token({"sub": "7", "exp": later}, "another-secret-" + "x" * 32)
        },
        "expired": {"authorization": "Bearer " + _token({"sub": "7", "iat": now - 7200, "exp": now - 3600}, secret)},
        # a user id is any string of 1..255 characters without control characters ("abc", "0", "-7" are)
        "sub-control-character": {"authorization": "Bearer " + _token({"sub": "7\n", "exp": later}, secret)},
        "sub-missing": {"authorization": "Bearer " + _token({"exp": later}, secret)},
        "sub-empty": {"authorization": "Bearer " + _token({"sub": "", "exp": later}, secret)},
        "sub-nul": {"authorization": "Bearer " + _token({"sub": "\x00", "exp": later}, secret)},
        "sub-256-characters": {"authorization": "Bearer " + _token({"sub": "u" * 256, "exp": later}, secret)},
        "alg-none": {"authorization": "Bearer " + jwt.encode({"sub": "7", "exp": later}, None, algorithm="none")},
        "tampered-payload": {"authorization": "Bearer " + _tampered(_token({"sub": "7", "exp": later}, secret))},
    }


def _tampered(token: str) -> str:
    """The same signature over a payload that now says sub 8."""
    import base64

    header, _payload, signature = token.split(".")
    payload = base64.urlsafe_b64encode(json.dumps({"sub": "8", "exp": int(time.time()) + 3600}).encode())
    return ".".join([header, payload.decode().rstrip("="), signature])


AUTH_CASES = list(_auth_cases("names-only-" + "x" * 32))


@pytest.mark.parametrize("case", AUTH_CASES)
@pytest.mark.parametrize(
    "document",
    [VIEWER, "{ inbox { nodes { id } } }", 'mutation { createGroup(title: "t", memberIds: []) { id } }'],
    ids=["viewer", "inbox", "createGroup"],
)
async def test_requests_without_a_valid_token_are_unauthenticated(client, engine, case, document):
    headers = _auth_cases(client.settings.jwt_secret.get_secret_value())[case]
    response = await client.raw(document, headers=headers)
    errors = assert_contract_errors(response, "UNAUTHENTICATED")
    assert response.json().get("data") is None
    assert len(errors) == 1
    from sqlalchemy import text

    async with engine.connect() as conn:  # a refused mutation wrote nothing
        assert (await conn.execute(text("SELECT count(*) FROM conversation"))).scalar_one() == 0


async def test_a_valid_token_is_accepted_so_the_refusals_above_are_about_the_token(client):
    secret = client.settings.jwt_secret.get_secret_value()
    token = _token({"sub": "7", "exp": int(time.time()) + 3600}, secret)
    response = await client.raw(VIEWER, headers={"authorization": f"Bearer {token}"})
    assert response.json() == {"data": {"viewer": {"userId": "7", "totalUnread": 0}}}


def _raw_send(cid: str, body_json: str) -> bytes:
    """A JSON request body written by hand, so that it can hold escapes json.dumps would not make."""
    document = SEND_VAR.replace('"', '\\"')
    return (
        f'{{"query": "{document}", "variables": {{"c": "{cid}", "k": "{uuid.uuid4()}", "b": {body_json}}}}}'
    ).encode()


async def _post(client, content: bytes, user: int = 1):
    return await client.http.post(
        client.url,
        content=content,
        headers={"content-type": "application/json", "authorization": f"Bearer {client.token(user)}"},
    )


@pytest.mark.parametrize(
    "body_json",
    ['"hi \\ud800 there"', '"\\udc00"', '"\\ud800"', '"ok \\udfff\\ud800"'],
    ids=["high-in-text", "lone-low", "lone-high", "reversed-pair"],
)
async def test_a_message_body_with_a_lone_surrogate_is_bad_user_input_not_500(client, conversation, body_json):
    response = await _post(client, _raw_send(conversation, body_json))
    assert_contract_errors(response, "BAD_USER_INPUT")
    data = await client.data("query($c: ID!) { conversation(id: $c) { lastSeq } }", {"c": conversation}, user=1)
    assert data["conversation"]["lastSeq"] == 0


async def test_a_proper_surrogate_pair_is_an_ordinary_character(client, conversation):
    response = await _post(client, _raw_send(conversation, '"smile \\ud83d\\ude00"'))
    assert response.status_code == 200
    assert response.json() == {"data": {"sendMessage": {"message": {"seq": 1}}}}
    data = await client.data(
        "query($c: ID!) { messages(conversationId: $c) { nodes { body } } }", {"c": conversation}, user=1
    )
    assert data["messages"]["nodes"] == [{"body": "smile \U0001f600"}]


@pytest.mark.parametrize(
    ("name", "content"),
    [
        (
            "group-title",
            '{"query": "mutation($t: String!) { createGroup(title: $t, memberIds: []) { id } }",'
            ' "variables": {"t": "x\\ud800"}}',
        ),
        (
            "conversation-id",
            '{"query": "query($c: ID!) { conversation(id: $c) { id } }", "variables": {"c": "1\\ud800"}}',
        ),
        (
            "message-cursor",
            '{"query": "query($c: ID!, $a: String) { messages(conversationId: $c, after: $a)'
            ' { nodes { seq } } }", "variables": {"c": "CID", "a": "1\\ud800"}}',
        ),
        (
            "inbox-cursor",
            '{"query": "query($a: String) { inbox(after: $a) { nodes { id } } }", "variables": {"a": "\\ud800"}}',
        ),
        (
            "in-the-document",
            '{"query": "mutation { sendMessage(conversationId: \\"CID\\",'
            ' clientMsgId: \\"UUID\\", body: \\"x\\ud800\\") { duplicate } }"}',
        ),
        (
            "graphql-escape-in-the-document",
            '{"query": "mutation { sendMessage(conversationId: \\"CID\\",'
            ' clientMsgId: \\"UUID\\", body: \\"x\\\\ud800\\") { duplicate } }"}',
        ),
        ("in-a-comment", '{"query": "# \\ud800\\n{ viewer { userId } }"}'),
        ("operation-name", '{"query": "query Q { viewer { userId } }", "operationName": "Q\\ud800"}'),
    ],
    ids=lambda v: v if not v.startswith("{") else "",
)
async def test_lone_surrogates_anywhere_in_a_request_are_bad_user_input(client, conversation, name, content):
    content = content.replace("CID", conversation).replace("UUID", str(uuid.uuid4()))
    response = await _post(client, content.encode())
    assert_contract_errors(response, "BAD_USER_INPUT")
    data = await client.data("{ inbox { nodes { id lastSeq } } }", user=1)
    assert data["inbox"]["nodes"] == [{"id": conversation, "lastSeq": 0}]


def test_the_repositorys_copy_of_the_contract_is_the_shared_one():
    assert VENDORED_CONTRACT.is_file(), "api/contract.graphql is missing"
    shared = _shared_contract()
    if shared is not None:
        assert VENDORED_CONTRACT.read_text() == shared.read_text(), (
            "api/contract.graphql differs from ../shared/api/contract.graphql: copy the shared one"
        )
