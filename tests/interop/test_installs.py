"""The interop installs' own rules (:mod:`tests.interop.installs`): which runs start them in
the background, and that a fixture waits for the background holder of an install's lock (and
says whose lock it waited for when that takes too long)."""

from __future__ import annotations

import threading

import pytest

from tests.interop import installs

ROOT = installs.HERE.parent.parent


@pytest.mark.parametrize(
    ("args", "covers"),
    [
        (["tests"], True),
        (["."], True),
        (["tests/interop"], True),
        (["tests/interop/test_pynear.py::test_pynear_taker_quotes_from_the_bot"], True),
        (["tests/core", "tests/app"], False),
        (["tests/core", "tests/interop/test_interop.py"], True),
        (["tests/app/test_restart.py::test_kill_9_loop_recovers_open_quotes"], False),
    ],
)
def test_which_runs_start_the_installs(args: list[str], covers: bool) -> None:
    assert installs.covers_interop(args, ROOT) is covers


def test_a_run_from_another_folder_resolves_its_paths_there() -> None:
    assert installs.covers_interop(["interop"], ROOT / "tests")
    assert not installs.covers_interop(["core"], ROOT / "tests")


def test_a_second_holder_waits_and_names_the_lock_it_waited_for() -> None:
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with installs.held("test-lock"):
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(10)
        still_held = r"\.test-lock\.lock still held after 0\.3 s"
        with (
            pytest.raises(TimeoutError, match=still_held),
            installs.held("test-lock", wait_s=0.3),
        ):
            pass
    finally:
        release.set()
        holder.join(10)
    with installs.held("test-lock", wait_s=0.3):  # free again: taken at once
        pass
