"""A plan-once executor for accepted documents.

graphql-core interprets a document per request and per field: it collects
fields, looks up each field's definition, builds a resolve info, calls the
resolver through Strawberry's wrapper, and completes the value by inspecting
the output type. For a document the server has already accepted all of that
is the same every time. The planner decides it once per (document,
operationName) and runs closures afterwards:

- compile.py  the operation -> a tree of per-field closures (collect_fields is graphql-core's)
- codegen.py  each selection set's fields as one generated function (plain fields inline)
- execute.py  running the closures: graphql-core's algorithm, same order, same errors
- info.py     the `info` resolvers get (a Strawberry Info, built lazily)
- planner.py  the cache of plans, fallback to graphql-core's executor, counters for /metrics;
              HTTP queries and mutations (execute) and subscription events (execute_event)

The non-public API of graphql-core and Strawberry it relies on is in chatgql/compat/ (graphql_core.py, strawberry.py).

The API's meaning stays in the API's types/, queries.py and mutations.py: the plan
calls the same resolver functions. tests/graphql/plan/test_planner_differential.py runs
every document the test suite sends, and thousands of generated ones, through
both executors and requires identical JSON.
"""

from .planner import Planner, PlanStats

__all__ = ["Planner", "PlanStats"]
