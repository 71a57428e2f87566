"""Helpers of the CLI tests: payloads, JSON files, a subprocess run, error-line checks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from solver.protocol.nonce import nonce_to_text, salted_nonce

KEY_VAR = "SOLVER_TEST_SIGNING_KEY"
SALT_HEX = "252812b3"
SOLVER_SCRIPT = Path(sys.executable).parent / "solver"


def make_payload(**changes: Any) -> dict[str, Any]:
    """An unsigned payload (spec 2.10) with a fresh salted nonce and a far deadline."""
    payload: dict[str, Any] = {
        "signer_id": "solver.near",
        "verifying_contract": "intents.near",
        "deadline": "2099-11-22T10:00:00.000Z",
        "nonce": nonce_to_text(salted_nonce(bytes.fromhex(SALT_HEX))),
        "intents": [
            {
                "intent": "token_diff",
                "diff": {"nep141:usdc.near": "-1000000", "nep141:wnear.near": "250000"},
            }
        ],
    }
    payload.update(changes)
    return payload


def write_json(path: Path, value: Any) -> Path:
    path.write_bytes(orjson.dumps(value))
    return path


def run_solver(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    module: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``solver`` script (or ``python -m solver.cli``) in a child process."""
    if module:
        command = [sys.executable, "-m", "solver.cli", *argv]
    else:
        assert SOLVER_SCRIPT.exists(), "run `.venv/bin/pip install -e .` to create the script"
        command = [str(SOLVER_SCRIPT), *argv]
    child_env = {k: v for k, v in os.environ.items() if k != KEY_VAR}
    child_env.update(env or {})
    return subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        text=True,
        env=child_env,
        timeout=60,
        check=False,
    )


def assert_one_line_error(stderr: str) -> None:
    """Exactly one line, ``solver: error: ...``, and no traceback."""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("solver: error: "), stderr
