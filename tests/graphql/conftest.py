"""Fixtures the API's tests share: the session's server as a ChatApi, and its clock in the test's hands."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..support.clock import Clock, controlled
from ..support.live import ChatApi


@pytest.fixture
async def api(server, http) -> ChatApi:
    return ChatApi.of(server, http)


@pytest.fixture
def clock(server) -> Iterator[Clock]:
    with controlled(server) as controlled_clock:
        yield controlled_clock
