"""The store through the control API (issue 24): ``/control/store/history``, ``/export`` and
``/backup`` on a real server (127.0.0.1 port 0) over a real store; the token is required, and a
store error is a 503 with its message, not a 500."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from solver.io.control import StoreRoutes, create_control_app, serve_control
from solver.io.metrics import Metrics
from solver.io.store.sqlite_store import Store
from tests.chattr import immutable, require_chattr, store_paths
from tests.io.fake_control import TOKEN, TOKEN_VAR, FakeTarget
from tests.io.store_helpers import ACCOUNT, USDC, WNEAR, append_quotes, record, signed_quote

AUTH = {"authorization": f"Bearer {TOKEN}"}


async def test_history_export_and_backup_through_the_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    db = tmp_path / "var" / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        record(store, signed_quote("q1"), signed_quote("q2"))
        append_quotes(store, signed_quote("q3"))  # appended, not yet committed or projected
        routes = StoreRoutes(store, {USDC: 6, WNEAR: 24})
        app = create_control_app(FakeTarget(), Metrics(), token_env=TOKEN_VAR, store=routes)
        server = await serve_control(app, "127.0.0.1:0")
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                denied = await http.get("/control/store/history")
                assert denied.status_code == 401
                got = await http.get("/control/store/history?kind=quotes", headers=AUTH)
                assert got.status_code == 200, got.text
                doc = got.json()
                assert sorted(r["quote_id"] for r in doc["rows"]) == ["q1", "q2", "q3"]
                assert doc["totals"][0]["quotes"] == 3
                exported = await http.get(
                    "/control/store/export?table=quotes&format=jsonl", headers=AUTH
                )
                assert exported.status_code == 200 and exported.json()["rows"] == 3
                relative = await http.post(
                    "/control/store/backup", json={"path": "copy.sqlite"}, headers=AUTH
                )
                assert relative.status_code == 400
                copy = tmp_path / "copy.sqlite"
                made = await http.post(
                    "/control/store/backup", json={"path": str(copy)}, headers=AUTH
                )
                assert made.status_code == 200 and made.json()["bytes"] == copy.stat().st_size
                again = await http.post(
                    "/control/store/backup", json={"path": str(copy)}, headers=AUTH
                )
                assert again.status_code == 503 and "exists already" in again.json()["detail"]

                # A store that fails: 503 with the reason (root and chattr only).
                try:
                    require_chattr(db.parent)
                except pytest.skip.Exception as skipped:
                    print(f"store-failure part skipped: {skipped}")
                    return
                append_quotes(store, signed_quote("q4"))
                with immutable(store_paths(db)):
                    failing = await http.get("/control/store/history", headers=AUTH)
                assert failing.status_code == 503, failing.text
                assert "disk I/O error" in failing.json()["detail"]
        finally:
            await server.stop()
        assert Store(copy, create=False).journal.load()[1]  # the copy opens
