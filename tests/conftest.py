"""Session-wide pytest hooks."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import HealthCheck, settings

from tests.app.browser import SKIP_REASON, chromium_path
from tests.interop import installs
from tests.signer.helpers import TOKEN_SKIP_REASON, softhsm_module

pytest_plugins = ("tests.pg.fixtures",)  # pg_cluster, pg_url, store_overrides

# Property tests judge what is generated, never how fast: hypothesis's per-example deadline
# (200 ms) and its "input generation is slow" check read the wall clock, and on a machine whose
# cores are all busy (three workers on CI's two, issue 22's rule) a run failed one of them with
# no fault in the code. Every test's own @settings still sets its number of examples.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


def pytest_report_header() -> list[str]:
    """Say up front whether the status page is tested in a real browser and the signer with a
    real PKCS#11 token (skips are quiet)."""
    path = chromium_path()
    return [
        f"status page browser tests: {path}" if path else f"NOTE: {SKIP_REASON}",
        f"PKCS#11 token tests: {softhsm_module()}"
        if TOKEN_SKIP_REASON is None
        else f"NOTE: {TOKEN_SKIP_REASON}",
    ]


def pytest_terminal_summary(terminalreporter: object) -> None:
    """And at the end, where ``-q`` still shows it, when the browser tests were skipped."""
    if chromium_path() is None:
        terminalreporter.write_line(f"NOTE: {SKIP_REASON}")  # type: ignore[attr-defined]
    if TOKEN_SKIP_REASON is not None:
        terminalreporter.write_line(f"NOTE: {TOKEN_SKIP_REASON}")  # type: ignore[attr-defined]


_INSTALLS = pytest.StashKey[subprocess.Popen[bytes]]()


def pytest_configure(config: pytest.Config) -> None:
    """A run that includes the interop suite starts its installs (npm clients, py-near's venv)
    in the background now, in the main process only (not in each xdist worker): the registry
    wait overlaps with the other tests (:mod:`tests.interop.installs`)."""
    if hasattr(config, "workerinput") or not installs.covers_interop(
        config.args or ["tests"], config.invocation_params.dir
    ):
        return
    config.stash[_INSTALLS] = installs.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    process = config.stash.get(_INSTALLS, None)
    if process is not None:
        installs.stop(process)
