"""graphql-core's executor and parsed documents without reference cycles.

`chatgql serve` freezes long-lived objects out of the collector's passes
(collector.py); a frozen object is freed by reference counting only, so what
the server allocates per operation must not be a cycle.

Executors. Every executor keeps `async_helpers`, a tuple of two of its own bound methods:
executor -> tuple -> method -> executor, a cycle. Reference counting alone
never frees a cycle, so every HTTP operation, every subscription and every
subscription event left its executor (and the ~25 containers hanging off it:
variable values, field caches, error lists) for the garbage collector to find;
the young collections of a soak with 2,000 subscriptions freed about 6,000
such objects each. Here the helpers reach the executor through a weak
reference: they are only called while the executor runs (it is on the stack),
and once its last user lets go it is freed at once.
"""

from __future__ import annotations

from typing import Any

from ..compat import graphql_core as graphql_compat
from ..compat import strawberry as strawberry_compat


class AcyclicExecutionContext(strawberry_compat.ExecutionContextBase):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        graphql_compat.break_async_helpers_cycle(self)


def unlink_tokens(document: Any) -> None:
    """Parsed documents: the parser's tokens form a doubly linked list (prev <-> next), one cycle
    per document. Nothing reads `prev` once parsing is done; without it the list is a chain that
    reference counting frees with the document. (A one-off or refused document would otherwise
    be freed by the collector only, or never if it was frozen while its request ran.)"""
    loc = getattr(document, "loc", None)
    token = loc.start_token if loc is not None else None
    while token is not None:
        token.prev = None
        token = token.next
