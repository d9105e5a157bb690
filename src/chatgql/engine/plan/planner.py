"""Plans per accepted document: built once, run for every later request with it.

Planner.execute is what the HTTP fast path (prepared.py's accepted documents)
calls. It looks the (document text, operationName) up in an LRU of planned
documents; a document plans into one OperationPlan per assignment of the
variables its @skip/@include read (usually none: one plan). Variables are
coerced by graphql-core, as before. Whatever the compiler refuses
(compile.Unsupported) runs through prepared.execute_accepted, graphql-core's
executor, and is counted by reason; so is everything while the planner is off
(setting CHATGQL_PLANNER=false).
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from graphql import DocumentNode, FragmentDefinitionNode, GraphQLError, get_operation_ast
from graphql import ExecutionResult as CoreExecutionResult
from graphql.execution import get_variable_values
from strawberry.types import ExecutionResult

from ...compat import graphql_core as graphql_compat
from ...compat import strawberry as strawberry_compat
from ..prepared import execute_accepted
from .compile import OperationPlan, Unsupported, compile_operation, condition_variables, event_plan_key
from .execute import Run, execute_fields_serially, is_awaitable

log = logging.getLogger("chatgql.engine.plan")
_MAX_VARIANTS = 16  # plans per document (one per @skip/@include assignment); more: fallback


@dataclass
class PlanStats:
    """What /metrics reports (chatgql_plans_built_total, chatgql_plans_prebuilt_total,
    chatgql_plan_executions_total, chatgql_plan_fallbacks_total{reason})."""

    built: int = 0
    prebuilt: int = 0  # of those built, plans with a prebuilt field (compile.PREBUILT)
    executions: int = 0
    variable_errors: int = 0  # answered with graphql-core's variable errors, before any plan
    fallbacks: Counter = field(default_factory=Counter)


class _PlannedDocument:
    __slots__ = ("operation", "fragment_definitions", "fragments", "conditions", "variants")

    def __init__(self, operation: Any, fragment_definitions: dict[str, FragmentDefinitionNode]) -> None:
        self.operation = operation
        self.fragment_definitions = fragment_definitions
        self.fragments = {
            name: graphql_compat.FragmentDetails(d, None) for name, d in self.fragment_definitions.items()
        }
        self.conditions = condition_variables(operation, self.fragment_definitions)
        self.variants: dict[tuple, OperationPlan | str] = {}


class Planner:
    def __init__(self, *, enabled: bool = True, maxsize: int = 1024, prebuilt: bool = True) -> None:
        self.enabled = enabled
        self.prebuilt = prebuilt  # off: fields' prebuilders are not asked (compile.PREBUILT)
        self.stats = PlanStats()
        self._maxsize = maxsize
        self._documents: OrderedDict[tuple[str, str | None], _PlannedDocument | str] = OrderedDict()
        self._events: OrderedDict[int, _PlannedDocument] = OrderedDict()  # by subscription operation

    def execute_event(self, executor: Any) -> Any:
        """One subscription event by plan: what graphql-core's executor.execute_operation() would
        return for this per-event executor (root value: the event), or None to let it run."""
        if not self.enabled:
            return None
        operation = executor.operation
        key = event_plan_key(operation)
        planned = self._events.get(key)
        if planned is None or planned.operation is not operation:
            planned = self._events[key] = _PlannedDocument(operation, executor.fragment_definitions)
            if len(self._events) > self._maxsize:
                self._events.popitem(last=False)
        else:
            self._events.move_to_end(key)
        plan = self._variant(executor.schema._strawberry_schema, planned, executor.variable_values)
        if isinstance(plan, str):
            self.stats.fallbacks[plan] += 1
            return None
        self.stats.executions += 1
        return run_event(plan, executor)

    async def execute(
        self,
        schema: Any,
        document: DocumentNode,
        query: str,
        variables: dict[str, Any] | None,
        operation_name: str | None,
        context: Any,
    ) -> ExecutionResult:
        """The answer execute_accepted would give, by plan when the document has one."""
        if not self.enabled:
            self.stats.fallbacks["disabled"] += 1
            return await execute_accepted(schema, document, variables, operation_name, context)
        planned = self._planned(document, query, operation_name)
        if isinstance(planned, str):
            return await self._fall_back(planned, schema, document, variables, operation_name, context)
        core = strawberry_compat.core_schema(schema)
        coerced = get_variable_values(
            core, planned.operation.variable_definitions or (), variables or {}, max_errors=50
        )
        if isinstance(coerced, list):  # variable errors: what graphql-core answers, no plan needed
            self.stats.variable_errors += 1
            schema.process_errors(coerced)
            return ExecutionResult(data=None, errors=coerced)
        plan = self._variant(schema, planned, coerced)
        if isinstance(plan, str):
            return await self._fall_back(plan, schema, document, variables, operation_name, context)
        self.stats.executions += 1
        return await run_plan(schema, plan, context, coerced)

    async def _fall_back(self, reason: str, *args: Any) -> ExecutionResult:
        self.stats.fallbacks[reason] += 1
        return await execute_accepted(*args)

    def _planned(self, document: DocumentNode, query: str, operation_name: str | None) -> _PlannedDocument | str:
        key = (query, operation_name)
        planned = self._documents.get(key)
        if planned is not None:
            self._documents.move_to_end(key)
            return planned
        operation = get_operation_ast(document, operation_name)
        if operation is None:
            planned = "no_operation"
        elif operation.operation.value not in ("query", "mutation"):
            planned = "operation_type"
        else:
            fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
            planned = _PlannedDocument(operation, fragments)
        self._documents[key] = planned
        if len(self._documents) > self._maxsize:
            self._documents.popitem(last=False)
        return planned

    def _variant(self, schema: Any, planned: _PlannedDocument, coerced: Any) -> OperationPlan | str:
        values = coerced.coerced
        key = tuple(values.get(name) for name in planned.conditions)
        plan = planned.variants.get(key)
        if plan is not None:
            return plan
        if len(planned.variants) >= _MAX_VARIANTS:
            return "too_many_variants"
        try:
            plan = compile_operation(
                schema, planned.operation, planned.fragment_definitions, planned.fragments, coerced, self.prebuilt
            )
        except Unsupported as refusal:
            plan = refusal.reason
        except (GraphQLError, RecursionError):
            return "compile_error"  # e.g. a null @include(if:): graphql-core says so, not cached
        except Exception:  # a bug here must not cost the request: graphql-core answers it
            log.exception("could not plan an accepted document")
            plan = "planner_bug"
        else:
            self.stats.built += 1
            self.stats.prebuilt += bool(plan.prebuilt)
        planned.variants[key] = plan
        return plan


def run_event(plan: OperationPlan, executor: Any) -> Any:
    """Executor.execute_operation(False) for a subscription event, by plan: the ExecutionResult
    (or an awaitable of it) with errors as graphql-core collects them; Strawberry processes them."""
    run = Run(executor.schema, plan, executor.context_value, executor.variable_values)
    try:
        data = plan.execute(run, executor.root_value, None)
    except GraphQLError as error:
        run.add_error(error, None)
        return CoreExecutionResult(None, run.errors or None)
    if is_awaitable(data):

        async def await_data() -> CoreExecutionResult:
            try:
                done = await data
            except GraphQLError as error:
                run.add_error(error, None)
                return CoreExecutionResult(None, run.errors or None)
            return CoreExecutionResult(done, run.errors or None)

        return await_data()
    return CoreExecutionResult(data, run.errors or None)


async def run_plan(schema: Any, plan: OperationPlan, context: Any, variables: Any) -> ExecutionResult:
    """Executor.execute_operation + execute_accepted's error handling, for a plan."""
    run = Run(strawberry_compat.core_schema(schema), plan, context, variables)
    try:
        try:
            data = (
                execute_fields_serially(run, plan.fields, None, None) if plan.serial else plan.execute(run, None, None)
            )
            if is_awaitable(data):
                data = await data
        except GraphQLError as error:
            run.add_error(error, None)
            data = None
    except Exception as error:  # noqa: BLE001 - as execute_accepted answers a failing execute()
        failure = [GraphQLError(str(error), original_error=error)]
        schema.process_errors(failure)
        return ExecutionResult(data=None, errors=failure)
    errors = run.errors or None
    if errors:
        schema.process_errors(errors)
    return ExecutionResult(data=data, errors=errors)
