"""A pytest plugin that records the documents the test suite sends, for tests/graphql/plan/planner_corpus.json.

    PYTHONPATH=src:scripts python -m pytest tests/test_*.py tests/graphql tests/services tests/store tests/clients -p record_planner_corpus
    python scripts/record_planner_corpus.py /tmp/recorded.jsonl > tests/graphql/plan/planner_corpus.json

Every document that passes validation is appended (with its variables and
operationName) to $PLANNER_RECORD (default /tmp/recorded.jsonl); the second
command keeps queries and mutations, each document with at most two sets of
variables. test_planner_differential.py runs the corpus through both executors.

After a feature, recording only its tests is enough: given the corpus as a second argument,
the second command prints it with the documents it does not hold yet added at its end.

    python scripts/record_planner_corpus.py /tmp/recorded.jsonl tests/graphql/plan/planner_corpus.json > /tmp/corpus.json
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

OUT = os.environ.get("PLANNER_RECORD", "/tmp/recorded.jsonl")


def _install() -> None:
    from chatgql.engine import operation as context

    original = context.ChatOperation.on_validate

    async def on_validate(self):  # type: ignore[no-untyped-def]
        execution_context = self.execution_context
        async for step in original(self):  # an async generator (operation.ChatOperation.on_validate)
            yield step
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


def merged(corpus: list[dict], recorded: list[dict]) -> list[dict]:
    """corpus, then the recorded documents it does not hold (by document and operation name)."""
    held = {(entry["query"], entry["operationName"]) for entry in corpus}
    return corpus + [entry for entry in recorded if (entry["query"], entry["operationName"]) not in held]


if __name__ == "__main__":
    recorded = build(sys.argv[1])
    if len(sys.argv) > 2:
        recorded = merged(json.loads(Path(sys.argv[2]).read_text()), recorded)
    json.dump(recorded, sys.stdout, indent=1)
    sys.stdout.write("\n")
else:
    _install()
