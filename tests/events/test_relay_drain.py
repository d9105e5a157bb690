"""A busy relay shard under racing writers and failing publishes (events/relay.py _drain):
every row acknowledged exactly once, in order per key; a failed publish is sent again
before anything after it; and the outbox ends empty (a drain that ends deletes its last
batch, and reads again if a commit woke it meanwhile)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from chatgql.db import Database
from chatgql.events.relay import OutboxRelay
from chatgql.store import outbox

from ..support.live import wait_until

ROWS = 400  # written by racing writers while the relay drains
BATCH = 5


def key(n: int) -> str:
    """Each key is written by one writer (n % 4), in n order."""
    return f"{n % 4}.{n // 4 % 3}"


class FlakyPublisher:
    """Records what each publish acknowledges; its acks take a while (so reads overlap them),
    and some publishes fail after the ack wait, acknowledging nothing."""

    takes_text = False

    def __init__(self, fail_every: int) -> None:
        self.fail_every = fail_every
        self.calls = 0
        self.failed = 0
        self.acked: dict[str, list[int]] = defaultdict(list)

    async def publish(self, batch: Sequence[tuple[str, Any]], created: Sequence[float] | None = None) -> None:
        self.calls += 1
        await asyncio.sleep(0.01)
        if self.calls % self.fail_every == 0:
            self.failed += 1
            raise ConnectionError("broker went away")
        for key, payload in batch:
            self.acked[key].append(payload["n"])


async def test_a_busy_shard_keeps_order_and_resends_only_after_a_failure(migrated_url):
    database = await Database(migrated_url, max_size=8).open()
    publisher = FlakyPublisher(fail_every=7)
    relay = OutboxRelay(database, publisher, shards=4, batch_size=BATCH, standby_seconds=0.05)
    relaying = asyncio.create_task(relay.run())
    try:
        await wait_until(lambda: relay.is_leader, 15, "the relay to lead")

        async def writer(first: int) -> None:
            for n in range(first, ROWS, 4):
                async with database.connection() as conn:
                    await outbox.append(conn, [(key(n), {"n": n, "type": "t"})])
                relay.wake()
                if n % 16 == 0:
                    await asyncio.sleep(0)

        await asyncio.gather(*(writer(i) for i in range(4)))

        async def drained() -> bool:
            async with database.connection() as conn:
                left = await conn.fetchval("SELECT count(*) FROM outbox")
            return left == 0 and sum(map(len, publisher.acked.values())) >= ROWS

        await wait_until(drained, 60, "the outbox to drain")
    finally:
        relaying.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relaying
        await database.close()
    assert publisher.failed > 0
    # A failed publish acknowledged nothing; each acknowledged batch was deleted before the
    # shard's next read returned: every row acknowledged exactly once, in order per key.
    expected: dict[str, list[int]] = defaultdict(list)
    for n in range(ROWS):
        expected[key(n)].append(n)
    assert dict(publisher.acked) == dict(expected)
