"""Freed memory given back to the system after a large transient (solver/runtime/heap.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from solver.runtime import heap

CHILD = textwrap.dedent(
    """
    import json
    from pathlib import Path

    from solver.runtime import heap

    def rss_mb():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    start = rss_mb()
    # 40 MB in blocks too large for Python's small-object allocator (the C heap's), one in 50
    # kept: the free space lies between live blocks, where malloc keeps it for the process.
    blocks = [bytes(2048) for _ in range(20_000)]
    kept = blocks[::50]
    del blocks
    freed = rss_mb()
    gave = heap.give_back()
    print(json.dumps({"start": start, "freed": freed, "after": rss_mb(), "gave": gave}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_freed_heap_memory_goes_back_to_the_system() -> None:
    import json

    # A fresh process: this one's heap holds whatever the other tests left.
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    figures = json.loads(out.stdout)
    if not figures["gave"]:
        pytest.skip("this C library has no malloc_trim")
    assert figures["freed"] - figures["start"] > 30, figures  # kept by malloc once freed
    assert figures["freed"] - figures["after"] > 25, figures  # given back


def test_give_back_says_whether_it_could() -> None:
    assert heap.give_back() is (heap._malloc_trim() is not None)


SNAPSHOTS_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    from solver.runtime import heap

    if sys.argv[2] == "mapped":
        heap.large_blocks_mapped()  # as the long-running commands do
    from solver.io.store.sqlite_store import Store

    def rss_mb():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    store = Store(sys.argv[1])
    after = []
    for n in range(4):
        text = json.dumps({"n": n, "quotes": ["x" * 200] * 40_000}).encode()  # ~8 MB
        job = store.store_snapshot(text, 0, 0)  # in the store's checkpointer thread
        del text
        assert job.done.wait(60)
        assert job.error is None, job.error
        store.commit()  # the pass over
        heap.give_back()
        after.append(rss_mb())
    store.close()
    print(json.dumps(after))
    """
)


@pytest.mark.skipif(not heap.give_back(), reason="no malloc_trim in this C library")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_snapshots_written_by_the_stores_thread_leave_no_memory_behind(tmp_path: Path) -> None:
    """The store's checkpointer thread writes each desk snapshot, SQLite copying its text;
    served from the thread's own arena that copy stayed resident (+7.7 MB from the second
    on, the soak's "growing"). With large blocks mapped (as the long-running commands set:
    ``heap.large_blocks_mapped``) the memory goes back after each."""
    import json

    out = subprocess.run(
        [sys.executable, "-c", SNAPSHOTS_CHILD, str(tmp_path / "bot.sqlite"), "mapped"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    after = json.loads(out.stdout)
    assert max(after) - after[0] < 3.0, after  # MB: 7.7 more when the thread kept its own
