"""The replay's counts (benchmarks/replay_instructions.py): callgrind's total read from its
summary, and the opcodes a request runs counted by function, the same in two runs (issue 29:
the figures the rounds decide by must not move with the machine's load)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.replay import make_stream
from benchmarks.replay_instructions import collected, main, opcodes


def test_the_callgrind_total_is_read_from_its_summary() -> None:
    stderr = b"==12== Events    : Ir\n==12== Collected : 4823456789\n==12==\n==12== I   refs:\n"
    assert collected(stderr) == 4_823_456_789


@pytest.mark.parametrize("stderr", [b"", b"Traceback ...\nValueError: boom\n"])
def test_a_child_without_a_total_is_an_error_that_shows_its_output(stderr: bytes) -> None:
    with pytest.raises(RuntimeError, match="no callgrind total"):
        collected(stderr)


def test_opcodes_by_function_are_the_same_in_two_runs(tmp_path: Path) -> None:
    stream = tmp_path / "s.jsonl.gz"
    make_stream(stream, 300)
    requests, first = opcodes("spread", stream)
    again, second = opcodes("spread", stream)
    assert requests == again == 300
    by_name = {name: count for (_, name), count in first.items()}
    again_by_name = {name: count for (_, name), count in second.items()}
    # every request is decided once by the pipeline, in more than a few bytecodes, and the
    # same ones in both runs
    assert by_name["QuotePipeline.decide"] > 300 * 50
    assert by_name["QuotePipeline.decide"] == again_by_name["QuotePipeline.decide"]
    assert by_name["QuoteLifecycle.decide"] == again_by_name["QuoteLifecycle.decide"]
    # the whole run within 2 %: the first run also warms the process's caches (ABC checks,
    # scales), and module-level caches that other tests of this worker filled may be cleared
    # in either run (``second_text``'s at 4,096 seconds: 38 opcodes more in the second run of
    # one suite under load)
    total, total_again = sum(first.values()), sum(second.values())
    assert abs(total - total_again) <= total_again * 0.02


def test_a_bad_request_count_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--requests", "0"])
    assert "--requests must be at least 1" in capsys.readouterr().err


def test_without_valgrind_it_says_so_and_names_the_way_without(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import benchmarks.replay as replay_bench

    stream = tmp_path / "s.jsonl.gz"
    make_stream(stream, 10)
    monkeypatch.setattr(replay_bench, "stream_for", lambda *_: (stream, {}))
    monkeypatch.setenv("PATH", str(tmp_path))  # no valgrind on it
    assert shutil.which("valgrind") is None
    assert main(["--requests", "10"]) == 2
    assert "valgrind is not installed" in capsys.readouterr().err
