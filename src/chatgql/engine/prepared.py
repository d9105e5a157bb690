"""Documents the server has already accepted run without Strawberry's per-request pipeline.

Clients send the same handful of documents over and over, with new variables.
The first time a document arrives it takes the whole way through Strawberry:
the token limit, parsing, the operation-type checks, validation with chatgql's
rules (depth, aliases, fields, no introspection in production). When it passes
all of that, `operation.ChatOperation` keeps the parsed document here. From then
on an HTTP POST carrying the same text is executed by its plan (engine/plan/)
or, where the planner declines or is switched off, by execute_accepted below:
straight by graphql-core's executor, with the same schema, the same resolvers,
the same execution context class and the same error rewriting
(`Schema.process_errors`). Either way the relay is woken after a mutation as
`ChatOperation.on_execute` does.

What it skips is per-request overhead that cannot change the answer for a
document already known to be valid: building a dozen extension objects and
their hooks, cache lookups through extensions, the view's request adapters.
A profile of sendMessage put that at about a fifth of the server's CPU.

Anything else (a new or invalid document, a batch, GET, a streaming Accept
header, odd JSON) goes the ordinary way, so every refusal keeps its single
source. tests/graphql/test_prepared.py checks that both ways answer alike.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, cast

from graphql import DocumentNode, GraphQLError, execute, get_operation_ast
from graphql import ExecutionResult as CoreExecutionResult
from graphql import OperationType as CoreOperationType
from graphql.language import Node
from strawberry.types import ExecutionResult

from ..compat import strawberry as strawberry_compat
from ..compat.strawberry import is_awaitable

_EXECUTABLE = (CoreOperationType.QUERY, CoreOperationType.MUTATION)


class AcceptedDocuments:
    """query text -> parsed document, for documents that parsed and validated cleanly (LRU).

    Bounded by count and by the total length of the texts: a parsed document
    is about one garbage-collected object per two characters, and the
    collector's full passes walk every one of them (a cache of 1,024 large
    documents made pauses of a second). Kept documents lose their token
    chain (the parser's doubly linked list of every token, needed for
    nothing after parsing), which takes a third of their objects and every
    reference cycle: an evicted document is freed at once.
    """

    def __init__(self, maxsize: int = 1024, max_chars: int = 100_000) -> None:
        self._maxsize = maxsize
        self._max_chars = max_chars
        self._chars = 0
        self._documents: OrderedDict[str, DocumentNode] = OrderedDict()

    def get(self, query: str) -> DocumentNode | None:
        document = self._documents.get(query)
        if document is not None:
            self._documents.move_to_end(query)
        return document

    def add(self, query: str, document: DocumentNode) -> None:
        if len(query) > self._max_chars or query in self._documents:
            return
        self._documents[query] = _without_tokens(document)
        self._chars += len(query)
        while len(self._documents) > self._maxsize or self._chars > self._max_chars:
            evicted, _ = self._documents.popitem(last=False)
            self._chars -= len(evicted)

    def __len__(self) -> int:
        return len(self._documents)

    def __contains__(self, query: object) -> bool:
        return query in self._documents


def _without_tokens(document: DocumentNode) -> DocumentNode:
    """The document, its nodes' locations keeping their offsets and source (what errors
    report) but not the tokens they started and ended at."""
    pending: list[Node] = [document]
    while pending:
        node = pending.pop()
        if node.loc is not None:
            node.loc.start_token = node.loc.end_token = None  # type: ignore[assignment]
        for key in node.keys:
            value = getattr(node, key, None)
            if isinstance(value, Node):
                pending.append(value)
            elif isinstance(value, tuple | list):
                pending.extend(item for item in value if isinstance(item, Node))
    return document


def operation_type(document: DocumentNode, operation_name: str | None) -> CoreOperationType | None:
    """The type of the operation a request selects; None when it selects none (Strawberry says why)."""
    operation = get_operation_ast(document, operation_name)
    return None if operation is None else operation.operation


async def execute_accepted(
    schema: Any,
    document: DocumentNode,
    variables: dict[str, Any] | None,
    operation_name: str | None,
    context: Any,
) -> ExecutionResult:
    """What Schema.execute does after validation, for a document that passed it."""
    try:
        outcome = execute(
            strawberry_compat.core_schema(schema),
            document,
            root_value=None,
            middleware=None,
            variable_values=variables,
            operation_name=operation_name,
            context_value=context,
            is_awaitable=is_awaitable,
            executor_class=schema.execution_context_class,
            **strawberry_compat.custom_context_kwargs(schema),
        )
        # (a TypeGuard narrows only where it holds)
        result = await outcome if is_awaitable(outcome) else cast("CoreExecutionResult", outcome)
    except Exception as error:  # noqa: BLE001 - Strawberry's own answer to a failing execute()
        errors = [error if isinstance(error, GraphQLError) else GraphQLError(str(error), original_error=error)]
        schema.process_errors(errors)
        return ExecutionResult(data=None, errors=errors)
    if result.errors:
        schema.process_errors(result.errors)
    return ExecutionResult(data=result.data, errors=result.errors)


def is_executable(kind: CoreOperationType | None) -> bool:
    """Queries and mutations answer over HTTP POST; anything else goes the ordinary way."""
    return kind in _EXECUTABLE
