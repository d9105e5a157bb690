"""Each use of a dependency's non-public API (chatgql/compat/), against the installed library.

One test per access: it fails, naming the access, when the private attribute,
function or module is gone or behaves otherwise. The first test fails on any
installed version other than the one chatgql.compat was written for: read
docs/internals/compat.md before moving a pin. No servers: protocols are driven over
a socketpair, a Kafka producer is never started; Redis is the one real server
(the backend fix can only be shown on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import re
import socket
import subprocess
import sys
import tomllib
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import graphql
import pytest
import strawberry
import uvicorn
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition
from graphql import GraphQLError, GraphQLResolveInfo, parse
from graphql.execution import get_variable_values
from strawberry.extensions import SchemaExtension
from strawberry.types import Info
from uvicorn.server import ServerState
from websockets.client import ClientProtocol
from websockets.uri import parse_uri

from chatgql import compat
from chatgql.compat import aiokafka as aiokafka_compat
from chatgql.compat import graphql_core as graphql_compat
from chatgql.compat import strawberry as strawberry_compat
from chatgql.compat import uvicorn as uvicorn_compat
from chatgql.compat import websockets as websockets_compat
from chatgql.server.websocket import _Flag, _Inbox

ROOT = Path(__file__).resolve().parent.parent


# --- versions ------------------------------------------------------------------------------------


def test_installed_versions_are_the_ones_compat_was_written_for():
    mismatches = compat.version_mismatches()
    assert not mismatches, (
        "chatgql.compat reaches into these libraries' private API and was written for other versions: "
        + "; ".join(mismatches)
        + ". Run tests/test_compat.py against the new version, fix compat.py, then update PINNED "
        "and pyproject.toml together (docs/internals/compat.md)."
    )


def test_pyproject_pins_exactly_what_compat_was_written_for():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins: dict[str, str] = {}
    for requirement in project["dependencies"]:
        name, sep, pinned = requirement.partition("==")
        if sep:
            pins[re.sub(r"\[.*\]", "", name).strip().lower()] = pinned.strip()
    for name, wanted in compat.PINNED.items():
        assert pins.get(name) == wanted, (
            f"pyproject.toml must pin {name}=={wanted} (compat.PINNED), found {pins.get(name)!r}"
        )


# --- a small Strawberry schema -------------------------------------------------------------------


@strawberry.interface
class Named:
    name: str


@strawberry.input
class Filter:
    prefix: str = ""


@strawberry.type
class Item(Named):
    size: int

    @strawberry.field
    def label(self, info: Info, upper: bool = False) -> str:
        return self.name.upper() if upper else self.name

    @strawberry.field
    async def later(self) -> int:
        return self.size


@strawberry.type
class Query:
    @strawberry.field
    def items(self, filter: Filter | None = None) -> list[Item]:
        names = ["apple", "avocado", "banana"]
        prefix = filter.prefix if filter else ""
        return [Item(name=n, size=len(n)) for n in names if n.startswith(prefix)]


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def tick(self, upto: int) -> AsyncIterator[int]:
        for n in range(upto):
            yield n


def small_schema(**kwargs: Any) -> strawberry.Schema:
    return strawberry.Schema(query=Query, subscription=Subscription, types=[Item], **kwargs)


def field_def(schema: strawberry.Schema, type_name: str, field_name: str) -> graphql.GraphQLField:
    return strawberry_compat.core_schema(schema).type_map[type_name].fields[field_name]  # type: ignore[union-attr]


# --- graphql-core --------------------------------------------------------------------------------


def test_collect_fields_groups_by_response_name_and_honours_skip():
    core = strawberry_compat.core_schema(small_schema())
    document = parse(
        "query($skip: Boolean!) { a: items { name } a: items { size } b: items @skip(if: $skip) { name } ...F }"
        " fragment F on Query { items { label } }"
    )
    operation = document.definitions[0]
    fragment_definition = document.definitions[1]
    variables = get_variable_values(core, operation.variable_definitions, {"skip": True})
    assert not isinstance(variables, list), variables
    fragments = {"F": graphql_compat.FragmentDetails(fragment_definition, None)}
    collected = graphql_compat.collect_fields(core, fragments, variables, core.query_type, operation, False)
    assert list(collected.grouped_field_set) == ["a", "items"], (
        "graphql.execution.collect_fields.collect_fields no longer groups by response name / honours @skip"
    )
    assert not collected.new_defer_usages
    details = collected.grouped_field_set["a"]
    assert [d.node.name.value for d in details] == ["items", "items"]
    sub = graphql_compat.collect_subfields(core, fragments, variables, operation, core.type_map["Item"], details, False)
    assert list(sub.grouped_field_set) == ["name", "size"], "collect_subfields changed shape or meaning"


def test_break_async_helpers_cycle_lets_reference_counting_free_the_executor():
    core = strawberry_compat.core_schema(small_schema())
    seen: list[weakref.ref] = []

    class Acyclic(strawberry_compat.ExecutionContextBase):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            assert isinstance(self.async_helpers, graphql.GraphQLResolveInfoHelpers), (
                "graphql-core executors no longer keep `async_helpers`"
            )
            assert self.async_helpers.gather.__func__ is type(self).gather_async_work  # type: ignore[attr-defined]
            assert self.async_helpers.track.__func__ is type(self).track_async_work  # type: ignore[attr-defined]
            graphql_compat.break_async_helpers_cycle(self)
            seen.append(weakref.ref(self))

    gc.disable()
    try:
        result = graphql.execute_sync(core, parse("{ items { name } }"), executor_class=Acyclic)
        assert result.errors is None, result.errors
        assert seen and seen[0]() is None, "break_async_helpers_cycle: the executor is still in a cycle"
    finally:
        gc.enable()


async def test_use_gather_with_cancel_is_what_graphql_cores_executor_gathers_with():
    from graphql.execution import executor

    from chatgql.engine.gather import gather_with_cancel

    assert executor.gather_with_cancel is graphql.pyutils.gather_with_cancel or (
        executor.gather_with_cancel is gather_with_cancel
    ), "graphql-core's executor no longer has gather_with_cancel as a module global"
    source = inspect.getsource(executor)
    assert source.count("await gather_with_cancel(") >= 3, "graphql-core gathers fields and list items elsewhere now"
    original = executor.gather_with_cancel
    gathered: list[int] = []

    async def counting(*awaitables: Any) -> list[Any]:
        gathered.append(len(awaitables))
        return await gather_with_cancel(*awaitables)

    async def resolve_items(*_: Any) -> list[dict]:
        return [{"name": "a"}, {"name": "b"}]

    async def resolve_name(item: dict, *_: Any) -> str:
        return item["name"]

    async def resolve_other(*_: Any) -> str:
        return "x"

    schema = graphql.build_schema("type Item { name: String } type Query { items: [Item] other: String }")
    schema.query_type.fields["items"].resolve = resolve_items  # type: ignore[union-attr]
    schema.query_type.fields["other"].resolve = resolve_other  # type: ignore[union-attr]
    schema.get_type("Item").fields["name"].resolve = resolve_name  # type: ignore[union-attr]
    graphql_compat.use_gather_with_cancel(counting)
    try:
        result = await graphql.graphql(schema, "{ items { name } other }")
    finally:
        graphql_compat.use_gather_with_cancel(original)
    assert result.errors is None and result.data == {"items": [{"name": "a"}, {"name": "b"}], "other": "x"}
    assert sorted(gathered) == [2, 2], gathered  # the two root fields, the two items


# --- Strawberry ----------------------------------------------------------------------------------


def test_core_schema_and_back():
    schema = small_schema()
    core = strawberry_compat.core_schema(schema)
    assert isinstance(core, graphql.GraphQLSchema), "Strawberry's Schema._schema is not the graphql-core schema"
    assert strawberry_compat.strawberry_schema_of(core) is schema, (
        "Strawberry no longer sets _strawberry_schema on its schema"
    )


async def test_execution_context_base_hooks_are_called_per_subscription_event():
    calls: list[tuple[str, Any]] = []

    class Recording(strawberry_compat.ExecutionContextBase):
        def build_per_event_executor(self, payload: Any) -> Any:
            calls.append(("build_per_event_executor", payload))
            return super().build_per_event_executor(payload)

        def execute_operation(self, serially: bool | None = None) -> Any:
            # what shared.SharedEventExecutor reads
            calls.append(("execute_operation", (self.root_value, self.variable_values.coerced)))
            assert self.operation.operation is graphql.OperationType.SUBSCRIPTION
            assert self.fragment_definitions == {}
            assert self.abort_signal is None
            assert self.is_awaitable(1) is False
            assert strawberry_compat.strawberry_schema_of(self.schema) is schema
            return super().execute_operation(serially)

    schema = small_schema(execution_context_class=Recording)
    results = [r async for r in await schema.subscribe("subscription { tick(upto: 2) }")]
    assert [r.data for r in results] == [{"tick": 0}, {"tick": 1}]
    assert calls == [
        ("build_per_event_executor", 0),
        ("execute_operation", (0, {})),
        ("build_per_event_executor", 1),
        ("execute_operation", (1, {})),
    ], f"graphql-core's per-event executor hooks changed: {calls}"


async def test_custom_context_kwargs_let_graphql_core_execute_as_strawberry_does():
    schema = small_schema()
    kwargs = strawberry_compat.custom_context_kwargs(schema)
    assert set(kwargs) == {"operation_extensions"}, f"Schema._get_custom_context_kwargs changed: {kwargs}"
    outcome = graphql.execute(
        strawberry_compat.core_schema(schema),
        parse("{ items { label(upper: true) later } }"),
        executor_class=schema.execution_context_class,
        is_awaitable=strawberry_compat.is_awaitable,
        **kwargs,
    )
    result = await outcome if strawberry_compat.is_awaitable(outcome) else outcome
    assert result.errors is None, result.errors
    assert result.data == {
        "items": [{"label": "APPLE", "later": 5}, {"label": "AVOCADO", "later": 7}, {"label": "BANANA", "later": 6}]
    }


async def test_provided_operation_name_is_what_the_request_carried():
    seen: list[Any] = []

    class Record(SchemaExtension):
        def on_validate(self):  # type: ignore[override]
            seen.append(strawberry_compat.provided_operation_name(self.execution_context))
            yield

    schema = small_schema(extensions=[Record])
    assert (await schema.execute("query A { items { name } }")).errors is None
    assert (await schema.execute("query A { items { name } }", operation_name="A")).errors is None
    assert seen == [None, "A"], f"ExecutionContext._provided_operation_name changed: {seen}"


async def test_set_validation_result_stops_strawberry_validating():
    class Refuse(SchemaExtension):
        def on_validate(self):  # type: ignore[override]
            strawberry_compat.set_validation_result(self.execution_context, [GraphQLError("from the extension")])
            yield

    result = await small_schema(extensions=[Refuse]).execute("{ items { name } }")
    assert [e.message for e in result.errors or ()] == ["from the extension"], (
        "Strawberry validated although an extension had set pre_execution_errors"
    )


def test_validate_document_is_strawberrys_validation():
    core = strawberry_compat.core_schema(small_schema())
    rules = (*graphql.specified_rules, graphql.validation.NoSchemaIntrospectionCustomRule)
    assert strawberry_compat.validate_document(core, parse("{ items { name } }"), rules) == []
    errors = strawberry_compat.validate_document(core, parse("{ items { nope } }"), rules)
    assert [e.message.split(".")[0] for e in errors] == ["Cannot query field 'nope' on type 'Item'"], errors
    assert strawberry_compat.validate_document(core, parse("{ __schema { types { name } } }"), rules), (
        "rules not applied"
    )


async def test_is_awaitable():
    async def coroutine() -> None:
        pass

    awaitable = coroutine()
    assert (
        strawberry_compat.is_awaitable(awaitable)
        and not strawberry_compat.is_awaitable(1)
        and not strawberry_compat.is_awaitable(None)
    )
    await awaitable


def test_convert_arguments_turns_coerced_arguments_into_python_values():
    schema = small_schema()
    sf = strawberry_compat.strawberry_field(field_def(schema, "Query", "items"))
    converted = strawberry_compat.convert_arguments(
        {"filter": {"prefix": "a"}},
        sf.arguments,
        scalar_registry=schema.schema_converter.scalar_registry,
        config=schema.config,
    )
    assert converted == {"filter": Filter(prefix="a")}, f"strawberry.types.arguments.convert_arguments: {converted}"


def test_strawberry_field_is_the_fields_definition():
    schema = small_schema()
    sf = strawberry_compat.strawberry_field(field_def(schema, "Item", "label"))
    assert isinstance(sf, strawberry.types.field.StrawberryField), "no 'strawberry-definition' extension"
    assert sf.python_name == "label"


def test_is_strawberry_type_check_for_a_type_implementing_an_interface():
    is_type_of = strawberry_compat.core_schema(small_schema()).type_map["Item"].is_type_of  # type: ignore[union-attr]
    assert strawberry_compat.is_strawberry_type_check(is_type_of), (
        f"Strawberry's is_type_of is now {is_type_of.__qualname__}"
    )
    assert is_type_of(Item(name="a", size=1), None) is True  # never reads its info
    assert is_type_of(object(), None) is False


def test_plain_arguments_are_the_scalars_convert_arguments_passes_on_unchanged():
    schema = small_schema()
    definition = strawberry_compat.strawberry_field(field_def(schema, "Item", "label"))
    converter = schema.schema_converter
    pairs = strawberry_compat.plain_arguments(definition, converter.scalar_registry, converter.config)
    assert pairs == (("upper", "upper"),), f"plain_arguments: {pairs}"
    # and convert_arguments indeed passes such a value on unchanged, under that name
    converted = strawberry_compat.convert_arguments(
        {"upper": True}, definition.arguments, scalar_registry=converter.scalar_registry, config=converter.config
    )
    assert converted == {"upper": True}, f"convert_arguments changed a scalar argument: {converted}"
    # an input object needs converting: not plain
    items = strawberry_compat.strawberry_field(field_def(schema, "Query", "items"))
    assert strawberry_compat.plain_arguments(items, converter.scalar_registry, converter.config) is None


def test_plain_class_is_the_class_a_type_was_defined_by():
    core = strawberry_compat.core_schema(small_schema())
    item = core.type_map["Item"]
    assert strawberry_compat.plain_class(item) is Item, (
        "a Strawberry type's definition no longer names its origin class"
    )  # type: ignore[arg-type]
    assert strawberry_compat.TYPE_CAST_ATTRIBUTE == "__as_strawberry_type__", strawberry_compat.TYPE_CAST_ATTRIBUTE

    class Row:
        name, size = "a", 1

    cast = strawberry.cast(Item, Row())
    assert getattr(cast, strawberry_compat.TYPE_CAST_ATTRIBUTE) is Item, (
        "strawberry.cast no longer marks with TYPE_CAST_ATTRIBUTE"
    )


def test_interface_type_name_answers_what_strawberrys_resolve_type_answers():
    core = strawberry_compat.core_schema(small_schema())
    named = core.type_map["Named"]
    assert strawberry_compat.is_strawberry_resolve_type(named), (  # type: ignore[arg-type]
        f"Strawberry's resolve_type is now {named.resolve_type.__qualname__}"  # type: ignore[union-attr]
    )
    assert strawberry_compat.interface_type_name(named, Item) == "Item"  # type: ignore[arg-type]

    # and Strawberry's resolve_type answers that too, when executing a field of the interface type
    @strawberry.type
    class Q:
        @strawberry.field
        def named(self) -> Named:
            return Item(name="a", size=1)

    answer = strawberry.Schema(query=Q, types=[Item]).execute_sync("{ named { __typename } }")
    assert answer.data == {"named": {"__typename": "Item"}}, answer
    assert strawberry_compat.interface_type_name(named, int) is None  # type: ignore[arg-type]


def test_ensure_valid_runtime_type_is_graphql_cores_check():
    from graphql import GraphQLError

    core = strawberry_compat.core_schema(small_schema())
    named = core.type_map["Named"]
    assert graphql_compat.ensure_valid_runtime_type(core, "Item", named, [], None, None) is core.type_map["Item"]
    with pytest.raises(GraphQLError, match="Nope"):
        graphql_compat.ensure_valid_runtime_type(core, "Nope", named, [], None, None)


def test_value_fields_are_the_fields_without_resolver_and_not_private():
    @strawberry.type
    class Shape:
        name: str
        size: int | None = None
        hidden: strawberry.Private[int] = 0

        @strawberry.field
        def label(self) -> str:
            return self.name

    fields = strawberry_compat.value_fields(Shape)
    assert set(fields) == {"name", "size"}, f"Private fields no longer told apart by is_private: {sorted(fields)}"
    assert fields["name"] is str


def test_is_default_resolver_reads_the_attribute():
    schema = small_schema()
    plain = field_def(schema, "Item", "size")
    assert strawberry_compat.is_default_resolver(plain), (
        "Strawberry's _get_basic_result is no longer marked _is_default"
    )
    assert plain.resolve(Item(name="a", size=3), None) == 3  # type: ignore[misc]
    assert not strawberry_compat.is_default_resolver(field_def(schema, "Item", "label"))


def test_is_strawberry_resolver_names_strawberrys_generated_resolvers():
    schema = small_schema()
    assert strawberry_compat.is_strawberry_resolver(field_def(schema, "Item", "label")), (
        "sync resolver no longer `_resolver`"
    )
    assert strawberry_compat.is_strawberry_resolver(field_def(schema, "Item", "later")), (
        "async one no longer `_async_resolver`"
    )
    assert not strawberry_compat.is_strawberry_resolver(field_def(schema, "Item", "size"))


def test_is_event_passthrough_for_a_subscription_root_field():
    tick = field_def(small_schema(), "Subscription", "tick")
    assert strawberry_compat.is_event_passthrough(tick), "a subscription field's resolve is no longer a lambda"
    event = object()
    assert tick.resolve(event, None, upto=1) is event  # type: ignore[misc]


def test_has_exception_handlers():
    schema = small_schema()
    sf = strawberry_compat.strawberry_field(field_def(schema, "Item", "label"))
    assert strawberry_compat.has_exception_handlers(schema, sf) is False


def test_resolver_call_shape():
    schema = small_schema()
    func, pass_self, source_names, info_name = strawberry_compat.resolver_call_shape(
        strawberry_compat.strawberry_field(field_def(schema, "Item", "label"))
    )  # type: ignore[misc]
    assert (func.__name__, pass_self, source_names, info_name) == ("label", True, (), "info"), (
        "StrawberryResolver's self/root/parent/info parameters changed"
    )
    assert (
        strawberry_compat.resolver_call_shape(strawberry_compat.strawberry_field(field_def(schema, "Item", "size")))
        is None
    )


def test_lazy_info_builds_the_raw_info_once_on_demand():
    schema = small_schema()
    built: list[int] = []
    core_field = field_def(schema, "Item", "label")

    class Lazy(strawberry_compat.LazyInfo):
        def build_raw_info(self) -> GraphQLResolveInfo:
            built.append(1)
            return GraphQLResolveInfo(
                "label", [], core_field.type, strawberry_compat.core_schema(schema).type_map["Item"], None, strawberry_compat.core_schema(schema),
                {}, None, None, {}, "the context", strawberry_compat.is_awaitable, None, None,  # type: ignore[arg-type]
            )  # fmt: skip

    info = Lazy(strawberry_compat.strawberry_field(core_field))
    assert isinstance(info, Info)
    assert info.python_name == "label", "Info no longer reads its StrawberryField from `_field`"
    assert built == []
    assert (info.field_name, info.context) == ("label", "the context"), "Info no longer reads `_raw_info`"
    assert info.return_type is not None
    assert built == [1]


async def test_ws_handlers_keep_the_init_timeout_attributes():
    from strawberry.asgi import GraphQL

    view = GraphQL(small_schema())
    for base in (strawberry_compat.TransportWSHandlerBase, strawberry_compat.LegacyWSHandlerBase):
        for hook in ("handle", "handle_connection_init"):
            assert inspect.iscoroutinefunction(getattr(base, hook, None)), f"{base.__name__}.{hook} is gone"
    handler = strawberry_compat.TransportWSHandlerBase(
        view, None, None, None, view.schema, __import__("datetime").timedelta(1)
    )  # type: ignore[arg-type]
    for name in ("view", "context", "websocket", "connection_init_received", "connection_init_timeout_task"):
        assert hasattr(handler, name), f"Strawberry's graphql-transport-ws handler has no `{name}`"
    handler.connection_init_received = True
    handler.connection_init_timeout_task = task = asyncio.ensure_future(asyncio.sleep(0))
    await task
    strawberry_compat.forget_cancelled_init_timeout(handler)
    assert handler.connection_init_timeout_task is None


async def test_a_completed_operation_sends_nothing_and_an_open_one_sends():
    """What a parked graphql-transport-ws subscription relies on (engine/parked.py): the base's
    `complete` after a run that parked is dropped because the Operation is marked completed."""
    from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import Operation

    sent: list = []

    class Handler:
        async def send_message(self, message: dict) -> None:
            sent.append(message)

        def forget_id(self, operation_id: str) -> None:
            sent.append(("forget", operation_id))

    operation = Operation(Handler(), "1", "subscription { x }", None, None)  # type: ignore[arg-type]
    assert operation.task is None and not operation.completed
    operation.completed = True
    await operation.send_operation_message({"id": "1", "type": "complete"})
    assert sent == []
    operation.completed = False
    await operation.send_operation_message({"id": "1", "type": "complete"})
    assert sent == [("forget", "1"), {"id": "1", "type": "complete"}]


# --- uvicorn, websockets, httptools --------------------------------------------------------------

UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


async def _echo(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while (message := await receive())["type"] == "websocket.receive":
            await send({"type": "websocket.send", "text": message["text"]})
        return
    while (message := await receive()).get("more_body"):
        pass
    status = 499 if message["type"] == "http.disconnect" else 200
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": message["type"].encode()})


@contextlib.asynccontextmanager
async def _connection(
    http: type = uvicorn_compat.HttpToolsProtocol, ws: type = uvicorn_compat.WebSocketsSansIOProtocol, app: Any = _echo
):
    """One connection served by uvicorn's protocols over a socketpair: (the HTTP protocol, the client socket)."""
    config = uvicorn.Config(app, http=http, ws=ws, lifespan="off", log_level="warning")
    config.load()
    state = ServerState()
    server_side, client = socket.socketpair()
    client.setblocking(False)
    made: list[Any] = []

    def factory() -> Any:
        made.append(config.http_protocol_class(config=config, server_state=state, app_state={}))
        return made[-1]

    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(factory, server_side)
    try:
        yield made[0], client
    finally:
        transport.close()
        client.close()
        for task in list(state.tasks):
            task.cancel()


async def _read(client: socket.socket) -> bytes:
    return await asyncio.wait_for(asyncio.get_running_loop().sock_recv(client, 65536), 5)


async def _websocket_echo(client: socket.socket) -> None:
    """Handshake, one text message there and back, as a websockets client would."""
    loop = asyncio.get_running_loop()
    ws = ClientProtocol(parse_uri("ws://test/"))
    ws.send_request(ws.connect())
    await loop.sock_sendall(client, b"".join(ws.data_to_send()))
    events: list[Any] = []
    while not events:
        ws.receive_data(await _read(client))
        events += ws.events_received()
    assert getattr(events[0], "status_code", None) == 101, events
    ws.send_text(b"hello")
    await loop.sock_sendall(client, b"".join(ws.data_to_send()))
    frames: list[Any] = []
    while not frames:
        ws.receive_data(await _read(client))
        frames += ws.events_received()
    assert frames[0].data == b"hello", frames


async def test_upgrading_to_websocket_tells_an_upgrade_from_a_request():
    answers: list[bool] = []

    class Recording(uvicorn_compat.HttpToolsProtocol):
        def on_headers_complete(self) -> None:
            answers.append(uvicorn_compat.upgrading_to_websocket(self))
            super().on_headers_complete()

    async with _connection(http=Recording) as (_, client):
        await asyncio.get_running_loop().sock_sendall(client, b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        assert (await _read(client)).startswith(b"HTTP/1.1 200")
    async with _connection(http=Recording) as (_, client):
        await _websocket_echo(client)
    assert answers == [False, True], f"upgrading_to_websocket (parser.should_upgrade, _should_upgrade): {answers}"


async def test_abandon_request_cycle_ends_the_handlers_receive_with_a_disconnect():
    async with _connection() as (protocol, client):
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(client, b"POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\nab")
        for _ in range(100):
            if protocol.cycle is not None and protocol.cycle.body == b"" and protocol.cycle.more_body:
                break
            await asyncio.sleep(0.005)
        uvicorn_compat.abandon_request_cycle(protocol.cycle)
        tasks = list(protocol.tasks)
        assert tasks, "no request task"
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        # uvicorn drops what a disconnected request's handler sends: nothing reaches the client
        assert protocol.cycle.disconnected, "RequestResponseCycle.disconnected is gone"


async def test_send_response_through_routes_the_cycles_writes():
    writes: list[bytes] = []

    class Through:
        def __init__(self, transport: Any) -> None:
            self._transport = transport

        def write(self, data: bytes) -> None:
            writes.append(data)
            self._transport.write(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._transport, name)

    class Routing(uvicorn_compat.HttpToolsProtocol):
        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            uvicorn_compat.send_response_through(self, Through)

    async with _connection(http=Routing) as (_, client):
        await asyncio.get_running_loop().sock_sendall(client, b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        assert (await _read(client)).startswith(b"HTTP/1.1 200")
    assert writes and writes[0].startswith(b"HTTP/1.1 200"), (
        f"RequestResponseCycle no longer writes through its transport attribute: {writes[:1]}"
    )


async def test_release_http_parser_after_an_upgrade_leaves_the_websocket_working():
    class Releasing(uvicorn_compat.HttpToolsProtocol):
        def handle_websocket_upgrade(self) -> None:
            super().handle_websocket_upgrade()
            uvicorn_compat.release_http_parser(self)

    async with _connection(http=Releasing) as (protocol, client):
        await _websocket_echo(client)
        assert protocol.parser is None


def test_uvicorn_calls_only_what_the_lighter_waiters_offer():
    source = inspect.getsource(uvicorn_compat.WebSocketsSansIOProtocol)
    queue_calls = set(re.findall(r"self\.queue\.(\w+)", source))
    writable_calls = set(re.findall(r"self\.writable\.(\w+)", source))
    assert queue_calls and queue_calls <= {"put_nowait", "get", "empty", "qsize"}, (
        f"uvicorn's websockets-sansio protocol calls {queue_calls} of its queue (websocket._Inbox)"
    )
    assert writable_calls and writable_calls <= {"set", "clear", "is_set", "wait"}, (
        f"uvicorn's websockets-sansio protocol calls {writable_calls} of `writable` (websocket._Flag)"
    )


async def test_replace_websocket_waiters_and_drop_websocket_handshake():
    made: list[Any] = []

    class Light(uvicorn_compat.WebSocketsSansIOProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            assert isinstance(self.queue, asyncio.Queue) and isinstance(self.writable, asyncio.Event)
            uvicorn_compat.replace_websocket_waiters(self, _Inbox(), _Flag())
            made.append(self)

        async def send(self, message: Any) -> None:
            await super().send(message)
            if message["type"] == "websocket.accept":
                assert self.request is not None and self.response is not None
                uvicorn_compat.drop_websocket_handshake(self)

    async with _connection(ws=Light) as (_, client):
        await _websocket_echo(client)  # the session works on the lighter waiters, without the handshake
        protocol = made[0]
        assert isinstance(protocol.queue, _Inbox) and isinstance(protocol.writable, _Flag)
        assert protocol.request is None and protocol.response is None, "drop_websocket_handshake"


async def test_end_websocket_parser_breaks_the_server_protocols_cycle():
    config = uvicorn.Config(_echo, lifespan="off", log_level="warning")
    config.load()
    protocol = uvicorn_compat.WebSocketsSansIOProtocol(config, ServerState(), {})
    conn = protocol.conn
    parser = conn.parser
    assert inspect.isgenerator(parser), "websockets' ServerProtocol.parser is no longer a generator"
    assert parser.gi_frame is not None and parser.gi_frame.f_locals.get("self") is conn, "no parser cycle"
    websockets_compat.end_websocket_parser(protocol)
    assert parser.gi_frame is None
    gc.disable()
    try:
        ref = weakref.ref(conn)
        del conn, parser, protocol
        assert ref() is None, "the ServerProtocol still waits for the collector after its parser ended"
    finally:
        gc.enable()


def test_use_websocket_deflate_replaces_uvicorns_factory_and_websockets_makes_no_state_it_is_not_asked_for():
    config = uvicorn.Config(_echo, lifespan="off", log_level="warning")
    config.load()
    protocol = uvicorn_compat.WebSocketsSansIOProtocol(config, ServerState(), {})
    (theirs,) = protocol.conn.available_extensions
    assert isinstance(theirs, websockets_compat.ServerPerMessageDeflateFactory), "uvicorn's deflate factory moved"
    ours = [object()]
    websockets_compat.use_websocket_deflate(protocol, lambda factory: ours if factory is theirs else None)
    assert protocol.conn.available_extensions is ours
    config = uvicorn.Config(_echo, lifespan="off", log_level="warning", ws_per_message_deflate=False)
    config.load()
    plain = uvicorn_compat.WebSocketsSansIOProtocol(config, ServerState(), {})
    websockets_compat.use_websocket_deflate(plain, lambda factory: ours)
    assert plain.conn.available_extensions == [] and websockets_compat.websocket_extensions(plain) == []
    # websockets makes no compressor for local_no_context_takeover, nor a decompressor for remote_...
    # (websocket.LeanDeflate makes its compressor itself, when it needs one)
    bare = websockets_compat.PerMessageDeflate(True, True, 12, 12, {"memLevel": 5})
    assert "encoder" not in bare.__dict__ and "decoder" not in bare.__dict__


# --- aiokafka ------------------------------------------------------------------------------------


async def test_abandon_unacknowledged_fails_what_kafka_did_not_acknowledge():
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")  # never started: no broker needed
    assert producer._sender.sender_task is None, "aiokafka's producer._sender.sender_task is gone"
    future = await producer._message_accumulator.add_message(TopicPartition("t", 0), None, b"x", timeout=1)
    error = KafkaError("stopped")
    await aiokafka_compat.abandon_unacknowledged(producer, error, 1.0)
    failed = future.exception() if future.done() else None
    assert isinstance(failed, KafkaError) and failed.args == error.args, (
        "producer._message_accumulator.fail_all changed"
    )


# --- chatgql's subclasses of library classes -----------------------------------------------------


def _overrides() -> list[tuple[type, type, tuple[str, ...]]]:
    from strawberry.asgi import GraphQL
    from strawberry.dataloader import DataLoader

    from chatgql.engine.handshake import LegacyWSHandler, TransportWSHandler
    from chatgql.engine.operation import ChatOperation
    from chatgql.engine.shared import SharedEventExecutor
    from chatgql.graphql.loaders import _Loader
    from chatgql.graphql.schema import ChatGraphQL, ChatSchema
    from chatgql.server.httpprotocol import DeadlineHttpProtocol
    from chatgql.server.websocket import LeanWebSocketProtocol

    return [
        (
            DeadlineHttpProtocol,
            uvicorn_compat.HttpToolsProtocol,
            (
                "connection_made",
                "connection_lost",
                "data_received",
                "on_message_begin",
                "on_headers_complete",
                "on_message_complete",
                "handle_websocket_upgrade",
                "pause_writing",
                "resume_writing",
            ),
        ),  # fmt: skip
        (
            LeanWebSocketProtocol,
            uvicorn_compat.WebSocketsSansIOProtocol,
            (
                "connection_made",
                "connection_lost",
                "data_received",
                "pause_writing",
                "resume_writing",
                "handle_ping",
                "handle_pong",
                "send",
                "send_keepalive_ping",
            ),
        ),  # fmt: skip
        (
            SharedEventExecutor,
            strawberry_compat.ExecutionContextBase,
            ("build_per_event_executor", "execute_operation"),
        ),
        (
            TransportWSHandler,
            strawberry_compat.TransportWSHandlerBase,
            (
                "handle",
                "handle_message",
                "handle_connection_init",
                "handle_subscribe",
                "run_operation",
                "cleanup_operation",
                "handle_task_exception",
            ),
        ),
        (
            LegacyWSHandler,
            strawberry_compat.LegacyWSHandlerBase,
            (
                "handle",
                "handle_message",
                "handle_connection_init",
                "handle_start",
                "handle_async_results",
                "cleanup_operation",
            ),
        ),
        (ChatSchema, strawberry.Schema, ("process_errors", "execute")),
        (
            ChatGraphQL,
            GraphQL,
            (
                "render_graphql_ide",
                "get_context",
                "on_ws_connect",
                "get_sub_response",
                "process_result",
                "create_response",
                "encode_json",
                "parse_json",
                "decode_json",
                "parse_http_body",
                "execute_operation",
            ),
        ),  # fmt: skip
        (ChatOperation, SchemaExtension, ("on_parse", "on_validate")),
        (_Loader, DataLoader, ("load",)),
    ]


def test_every_library_method_chatgql_overrides_still_exists_with_its_parameters():
    for ours, base, names in _overrides():
        for name in names:
            theirs = getattr(base, name, None)
            assert theirs is not None, (
                f"{base.__module__}.{base.__qualname__}.{name} is gone: {ours.__name__}'s override is dead"
            )
            mine = ours.__dict__.get(name) or next(
                k.__dict__[name] for k in ours.__mro__ if name in k.__dict__ and k.__module__.startswith("chatgql")
            )
            their_params = [p for p in inspect.signature(theirs).parameters.values() if p.kind is not p.VAR_KEYWORD]
            my_params = list(inspect.signature(mine).parameters.values())
            if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in my_params):
                continue  # takes whatever it is given
            assert [p.name for p in my_params][: len(their_params)] == [p.name for p in their_params], (
                f"{base.__qualname__}.{name}{inspect.signature(theirs)} no longer matches "
                f"{ours.__qualname__}.{name}{inspect.signature(mine)}"
            )


COMPAT_MODULES = (compat, aiokafka_compat, graphql_compat, strawberry_compat, uvicorn_compat, websockets_compat)


@pytest.mark.parametrize(
    ("module", "name"),
    [(m, n) for m in COMPAT_MODULES for n in sorted(m.__all__)],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_compat_exports_exist(module, name):
    assert hasattr(module, name), f"{module.__name__}.__all__ names {name}, which it does not define"


def test_compat_package_imports_no_library():
    """chatgql.compat itself (PINNED, version_mismatches) pulls in none of the libraries: importing
    one library's module (events/ takes aiokafka's) takes only that library."""
    code = (
        "import sys; import chatgql.compat.aiokafka; "
        "print(sorted(m for m in ('strawberry', 'graphql', 'uvicorn', 'websockets') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
