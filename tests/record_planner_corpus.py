"""A pytest plugin that records the documents the test suite sends, for tests/planner_corpus.json.

    PYTHONPATH=src:tests python -m pytest tests/test_*.py -p record_planner_corpus
    python tests/record_planner_corpus.py /tmp/recorded.jsonl > tests/planner_corpus.json

Every document that passes validation is appended (with its variables and
operationName) to $PLANNER_RECORD (default /tmp/recorded.jsonl); the second
command keeps queries and mutations, each document with at most two sets of
variables. test_planner_differential.py runs the corpus through both executors.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

OUT = os.environ.get("PLANNER_RECORD", "/tmp/recorded.jsonl")


def _install() -> None:
    from chatgql.graphql import context

    original = context.ChatOperation.on_validate

    def on_validate(self):  # type: ignore[no-untyped-def]
        execution_context = self.execution_context
        yield from original(self)
        if not execution_context.pre_execution_errors and execution_context.query:
            try:
                line = json.dumps(
                    {
                        "query": execution_context.query,
                        "operationName": execution_context.operation_name,
                        "variables": execution_context.variables,
                    }
                )
            except (TypeError, ValueError):
                return
            with open(OUT, "a") as out:
                out.write(line + "\n")

    context.ChatOperation.on_validate = on_validate


def build(path: str) -> list[dict]:
    from graphql import get_operation_ast, parse

    kept: dict[tuple, list[dict]] = {}
    long_documents = 0
    for line in Path(path).read_text().splitlines(keepends=True):
        entry = json.loads(line)
        # test_prepared makes documents new with a `# <uuid>` comment line: one of each is enough
        entry["query"] = re.sub(r"^# [0-9a-f-]{36}\n", "", entry["query"])
        if len(line) > 1500:  # generated batches of aliased mutations: a few of them
            if long_documents >= 6:
                continue
            long_documents += 1
        operation = get_operation_ast(parse(entry["query"]), entry["operationName"])
        if operation is None or operation.operation.value == "subscription":
            continue
        variants = kept.setdefault((entry["query"], entry["operationName"]), [])
        if len(variants) < 2 and entry not in variants:
            variants.append(entry)
    return [entry for variants in kept.values() for entry in variants]


if __name__ == "__main__":
    json.dump(build(sys.argv[1]), sys.stdout, indent=1)
    sys.stdout.write("\n")
else:
    _install()
