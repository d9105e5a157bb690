"""Give the C heap's free memory back to the system after mass disconnects (glibc).

When thousands of websockets close, what their connections allocated in C
(permessage-deflate's zlib state, ~35 KB a socket; the parsers' and the
transports' buffers) is freed, but glibc keeps it: free chunks inside its
heap, still resident, because live allocations above them keep the heap
from shrinking. malloc_trim(0) hands those pages back (madvise): after
thousands of sockets closed, most of what they grew (bench/results/micro.md).
What remains is CPython's own
allocator: 1 MiB arenas that still hold a few live objects each; the next
connections reuse them (a second wave of 1,000 ended where the first did).
MALLOC_ARENA_MAX would not help: the connections' memory comes from the
event loop's thread, glibc's main arena, and fragmentation keeps it there.

A loop of the lifespan looks every few seconds (mallinfo2, cheap) and
trims whenever glibc's heap holds `threshold` bytes free or more: a trim
with nothing left to give back is cheap too. (Trimming only when the
free bytes grew missed short bursts: freed pages that new connections
touch again are resident once more at the same free-byte count.)
Elsewhere than glibc >= 2.33 it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


class HeapTrimmer:
    """malloc_trim(0) when glibc's heap holds threshold bytes free; does nothing elsewhere."""

    def __init__(self, threshold: int = 16 << 20) -> None:
        self.threshold = threshold
        self._libc: ctypes.CDLL | None = None
        try:
            libc = ctypes.CDLL(None)
            libc.mallinfo2.restype = _MallInfo2
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            self._libc = libc
        except (OSError, AttributeError):
            pass
        self.trims = 0

    @property
    def available(self) -> bool:
        return self._libc is not None

    def free_bytes(self) -> int:
        return self._libc.mallinfo2().fordblks if self._libc is not None else 0

    def check(self) -> bool:
        """Trim when glibc's heap holds threshold bytes free or more; True when it trimmed."""
        if self._libc is None or self.free_bytes() < self.threshold:
            return False
        self._libc.malloc_trim(0)
        self.trims += 1
        return True

    async def run(self, interval: float = 5.0) -> None:
        if not self.available:
            return
        while True:
            await asyncio.sleep(interval)
            self.check()
