"""python -m bench.parkedexecutor [--kept N]

What a parked subscription's executor costs (engine/parked.py keeps it on the Parked from the
first wake-up with events until the operation ends): building it (what each wake-up did when it
was not kept), copying it for one event (what each event does), both timed with timeit, and the
memory one kept executor holds (tracemalloc, N of them kept), for bench/queries.py's
SUB_CONVERSATION on the API's schema, in this process. The executor's caches that executing events
fills are not in the size: it is the executor as built.

Not part of `python -m bench`: an investigation tool (bench/results/fastpaths.md cites it).
"""

from __future__ import annotations

import argparse
import gc
import timeit
import tracemalloc
from typing import Any

from graphql import parse
from graphql.execution.executor import Executor

from chatgql.compat import strawberry as strawberry_compat
from chatgql.graphql.schema import build_schema

from .queries import SUB_CONVERSATION


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.parkedexecutor", description=__doc__.split("\n\n")[1])
    parser.add_argument("--kept", type=int, default=2000, help="executors kept for the size")
    args = parser.parse_args()
    schema = build_schema()
    document = parse(SUB_CONVERSATION)
    core = strawberry_compat.core_schema(schema)
    variables = {"c": "Q29udmVyc2F0aW9uOjE="}
    context = object()

    def build() -> Any:
        return schema.execution_context_class.build(
            core,
            document,
            None,
            context,
            variables,
            "Live",
            middleware=None,
            is_awaitable=strawberry_compat.is_awaitable,
            **strawberry_compat.custom_context_kwargs(schema),
        )

    executor = build()
    if isinstance(executor, list):
        raise SystemExit(f"the document does not build: {executor}")
    payload = object()
    n = 20000
    built = min(timeit.repeat(build, number=n, repeat=5)) / n
    copied = min(timeit.repeat(lambda: Executor.build_per_event_executor(executor, payload), number=n, repeat=5)) / n
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = [build() for _ in range(args.kept)]
    gc.collect()
    after = tracemalloc.take_snapshot()
    size = sum(stat.size_diff for stat in after.compare_to(before, "filename")) / len(kept)
    print(f"build: {built * 1e6:.1f} us, per-event copy: {copied * 1e6:.1f} us")
    print(f"one kept executor: {size / 1024:.1f} KB (tracemalloc, {len(kept)} kept)")


if __name__ == "__main__":
    main()
