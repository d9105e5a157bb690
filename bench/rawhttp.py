"""A minimal keep-alive HTTP/1.1 POST client on asyncio streams.

httpx costs about 3 ms of CPU per request (stack-facts: an httpx generator
saturated its core at 240-360 requests/s); this costs a few tens of
microseconds, so the live and fanout senders and the fallback load
generator are not what is being measured.
"""

from __future__ import annotations

import asyncio


class Connection:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    async def post(self, path: str, body: bytes, authorization: str | None) -> tuple[int, bytes]:
        if self.writer is None:
            await self.open()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            + (f"Authorization: {authorization}\r\n" if authorization else "")
            + f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        try:
            header = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            raise
        lines = header.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        close = False
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            data = bytearray()
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                data += await self.reader.readexactly(size)
                await self.reader.readexactly(2)
            payload = bytes(data)
        elif length is not None:
            payload = await self.reader.readexactly(length)
        else:
            payload = await self.reader.read()
            close = True
        if close:
            self.close()
        return status, payload


class Pool:
    """Up to `size` keep-alive connections; post() waits for a free one."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.host = host
        self.port = port
        self._free: asyncio.Queue[Connection] = asyncio.Queue()
        for _ in range(size):
            self._free.put_nowait(Connection(host, port))

    async def open(self) -> Pool:
        conns = [self._free.get_nowait() for _ in range(self._free.qsize())]
        await asyncio.gather(*(c.open() for c in conns))
        for c in conns:
            self._free.put_nowait(c)
        return self

    async def post(self, body: bytes, authorization: str | None, path: str = "/graphql") -> tuple[int, bytes]:
        conn = await self._free.get()
        try:
            return await conn.post(path, body, authorization)
        except Exception:
            conn.close()
            raise
        finally:
            self._free.put_nowait(conn)

    def close(self) -> None:
        while not self._free.empty():
            self._free.get_nowait().close()
