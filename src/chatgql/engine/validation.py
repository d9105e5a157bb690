"""Validation of a new document, off the event loop.

A document the server has not accepted before is checked against the
operation limits (limits.py: linear, in the loop, a millisecond at worst)
and then validated by graphql-core. Validation is bounded by those limits
but not cheap: OverlappingFieldsCanBeMerged compares every pair of fields
that share a response name, and 100 copies of `inbox { nodes { id } }` (well
within 300 fields) take about 100 ms of CPU. So it runs in one worker
thread: the event loop keeps serving everyone else (the interpreter hands
it the GIL every few milliseconds), and requests carrying new documents
queue behind each other for that one thread, never using more than it.
Documents accepted before are not validated again (operation.ChatOperation).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graphql import DocumentNode, GraphQLError

from ..compat.strawberry import validate_document
from ..runtime import collector
from .limits import OperationLimits, check_document

# Its thread starts on first use and lives as long as the process.
_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chatgql-validate")


async def validate(
    schema: Any, document: DocumentNode, limits: OperationLimits, rules: tuple[type, ...]
) -> list[GraphQLError]:
    """The operation limits' refusal, or else graphql-core's validation errors (none: valid)."""
    exceeded = check_document(document, limits)
    if exceeded is not None:
        return [exceeded]
    return await asyncio.get_running_loop().run_in_executor(_worker, _validate, schema, document, rules)


_validating: dict[tuple, asyncio.Future[bool]] = {}


async def validate_once(
    query: str | None, schema: Any, document: DocumentNode, limits: OperationLimits, rules: tuple[type, ...]
) -> list[GraphQLError]:
    """validate(), but a document text already being validated is not validated again meanwhile:
    when the first validation finds it valid, so is this copy. (1,000 websockets connecting at once
    with the same new subscription validated it ~17 times, each making its own reference cycles.)
    Errors are never shared: a copy of a refused document is validated on its own."""
    if query is None:
        return await validate(schema, document, limits, rules)
    key = (query, rules, id(schema))
    first = _validating.get(key)
    if first is not None:
        if await asyncio.shield(first):
            return []
        return await validate(schema, document, limits, rules)
    valid = _validating[key] = asyncio.get_running_loop().create_future()
    try:
        errors = await validate(schema, document, limits, rules)
        valid.set_result(not errors)
        return errors
    finally:
        if not valid.done():
            valid.set_result(False)
        del _validating[key]


def _validate(schema: Any, document: DocumentNode, rules: tuple[type, ...]) -> list[GraphQLError]:
    try:
        return validate_document(schema, document, rules)
    finally:
        collector.cyclic_work_done()  # graphql-core's visitors are cycles: collected before the next freeze


def between_validations(work: Callable[[], None]) -> None:
    """Run work in the validation thread, after the validations queued before it (collector.py
    freezes there: no validation's cycles are alive then)."""
    _worker.submit(work)
