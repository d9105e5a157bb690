"""Per-user rate limits (token buckets), per process.

Each API process limits on its own: behind N processes a user gets up to N
times the rate. That is the accepted trade for needing no shared store.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from .errors import LimitExceeded


class RateLimiter:
    """rate tokens per second, up to burst; rate <= 0 turns it off."""

    def __init__(self, action: str, rate: float, burst: int, max_keys: int = 100_000) -> None:
        self.action = action
        self.rate = rate
        self.burst = burst
        self._max_keys = max_keys
        self._buckets: OrderedDict[int, tuple[float, float]] = OrderedDict()

    def check(self, user_id: int, now: float | None = None) -> None:
        """Take a token for user_id, or raise LIMIT_EXCEEDED with retryAfter (seconds)."""
        if self.rate <= 0:
            return
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.pop(user_id, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens < 1:
            self._buckets[user_id] = (tokens, now)
            retry_after = round((1 - tokens) / self.rate, 3)
            raise LimitExceeded(
                f"too many {self.action} calls; retry after {retry_after} s",
                reason="RATE_LIMITED",
                retryAfter=retry_after,
            )
        self._buckets[user_id] = (tokens - 1, now)
        if len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)  # the longest idle user: a full bucket again
