from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from sandbox.server import Sandbox
from tests.sandbox.scripted import sandbox_config


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    config = sandbox_config().model_copy(update={"fee_pips": 25})
    async with Sandbox(config, run_takers=False) as sb:
        yield sb


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client
