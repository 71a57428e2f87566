"""The status page's route of solver.io.control: a real uvicorn on 127.0.0.1:0, a fake target.

The page itself is exercised in a real browser in ``tests/app/test_status_page.py``; here: it is
served open (it holds no data), from the package, self-contained (nothing fetched from another
origin), with a Content-Security-Policy whose script hash matches its one inline script.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from solver.io.control import status_page_html
from solver.io.metrics import Metrics
from tests.io.fake_control import TOKEN, TOKEN_VAR, FakeTarget, running_control


@pytest.fixture
async def client(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    async with (
        running_control(FakeTarget(), Metrics()) as server,
        httpx.AsyncClient(base_url=server.url, timeout=5) as c,
    ):
        yield c


@pytest.mark.parametrize("path", ["/", "/status"])
async def test_the_page_is_served_without_a_token(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert "/control/status" in response.text and "sessionStorage" in response.text


async def test_the_csp_allows_exactly_the_inline_script(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    (script,) = re.findall(r"<script>(.*?)</script>", response.text, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = response.headers["content-security-policy"]
    assert f"script-src 'sha256-{digest}'" in csp
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp


def test_the_page_is_self_contained() -> None:
    """No CDN, no external font, no remote anything: the machine may have no internet."""
    html, _ = status_page_html()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert not re.search(r"https?://", html)
    assert "<script src" not in html and "<link" not in html


async def test_the_token_is_still_required_for_the_data(client: httpx.AsyncClient) -> None:
    assert (await client.get("/control/status")).status_code == 401
    assert (await client.get("/?token=" + TOKEN)).text == (await client.get("/")).text
