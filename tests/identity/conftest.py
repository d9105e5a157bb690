"""A real Keycloak (started once for this package by scripts/keycloak.sh, stopped after its
last test: under xdist its worker goes on without a JVM idling beside it) and chatgql servers
that trust it: tests/support/keycloak.py says how the realm is set up."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from ..conftest import RunningServer, drop_database, free_port_pair, make_settings, scratch_database
from ..support.keycloak import AUDIENCE, Keycloak, start, stop


@pytest.fixture(scope="package")
def keycloak_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Started here (scripts/keycloak.sh), or one already running at CHATGQL_TEST_KEYCLOAK_URL
    (its administrator admin / admin; the tests' realms in it are made anew)."""
    if url := os.environ.get("CHATGQL_TEST_KEYCLOAK_URL"):
        yield url.rstrip("/")
        return
    port = free_port_pair()
    run_dir = Path(tmp_path_factory.mktemp("keycloak"))
    url = start(port, run_dir)
    try:
        yield url
    finally:
        stop(port, run_dir)


@pytest.fixture(scope="package")
async def keycloak(keycloak_url: str, http: httpx.AsyncClient) -> Keycloak:
    provider = Keycloak(keycloak_url, http)
    await provider.setup()
    return provider


@pytest.fixture(scope="package")
async def oidc_database(migrated_url: str) -> AsyncIterator[str]:
    """A database of the identity servers' own: the one below is alone to relay its events."""
    url = await scratch_database(migrated_url, "identity")
    yield url
    await drop_database(migrated_url, "identity")


def oidc_settings(database_url: str, keycloak: Keycloak, **overrides: object):
    base: dict[str, object] = {
        "oidc_issuer": keycloak.issuer,
        "oidc_audience": AUDIENCE,
        "oidc_user_id_claim": "chat_user_id",
        "oidc_leeway_seconds": 1,
        "oidc_jwks_min_refetch_seconds": 0,
        "oidc_jwks_refresh_seconds": 3600,  # the tests fetch again when they mean to
    }
    base.update(overrides)
    return make_settings(database_url, **base)


@pytest.fixture(scope="package")
async def oidc_server(oidc_database: str, keycloak: Keycloak) -> AsyncIterator[RunningServer]:
    """chatgql trusting the chat realm, its keys from the issuer's discovery document."""
    async with RunningServer(oidc_settings(oidc_database, keycloak)) as running:
        yield running


class TcpProxy:
    """A TCP forwarder to Keycloak on 127.0.0.1 that a test can hold (connections wait until
    released) or take down (connections refused): a provider that is slow or unreachable."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.hold = False
        self.released = asyncio.Event()
        self.held = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def down(self) -> None:
        """Refuse connections from now on, and cut the open ones."""
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()
        self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            self._writers.add(up_writer)

            async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, holds: bool) -> None:
                with contextlib.suppress(OSError):
                    while data := await source.read(65536):
                        if holds and self.hold:  # a request (on a new or a kept-alive connection) waits
                            self.held += 1
                            await self.released.wait()
                        sink.write(data)
                        await sink.drain()
                sink.close()

            await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
            self._writers.discard(up_writer)
        except OSError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


@pytest.fixture
async def proxy(keycloak: Keycloak) -> AsyncIterator[TcpProxy]:
    running = await TcpProxy(int(keycloak.base_url.rsplit(":", 1)[1])).start()
    yield running
    running.released.set()
    if running._server is not None:
        await running.down()
