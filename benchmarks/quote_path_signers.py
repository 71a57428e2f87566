"""The quote-path benchmark's signer systems (issue 28): the bot with ``signer.mode: remote``
beside the in-process bot, in the same run.

- **signer_file**: the bot signing through ``solver signer serve`` holding the key in an
  owner-only file;
- **signer_token**: the same with the key in a SoftHSM2 token (made here in the scratch folder
  with ``softhsm2-util`` and ``solver keys import --pkcs11``; left out with a note when
  SoftHSM2 or python-pkcs11 is missing).

The signer's policy is the one a deployment would run (salt from the sandbox's ledger, a deadline
bound, caps per token) with caps far above what a run signs. Its process is measured with the
bot's: its CPU is in ``cpu_utilisation`` as ``<system>_signer`` and in
``cpu_us_per_answer_incl_signer``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

import yaml

from benchmarks.common import ROOT, Child, md_table, start_child
from benchmarks.quote_path_driver import ETH, NEAR, USDC
from solver.io.key_files import write_secret_key
from solver.protocol.keys import SecretKey

SIGNER_SYSTEMS = ("signer_file", "signer_token")
SOFTHSM_MODULES = (
    "/usr/lib/softhsm/libsofthsm2.so",
    "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
)
PIN_VAR = "BENCH_TOKEN_PIN"
READY_TIMEOUT_S = 30.0


def token_unavailable() -> str | None:
    """Why the token-backed system cannot run here, or None."""
    if shutil.which("softhsm2-util") is None or not any(Path(m).exists() for m in SOFTHSM_MODULES):
        return "SoftHSM2 is not installed: signer_token left out"
    if importlib.util.find_spec("pkcs11") is None:
        return "python-pkcs11 is not installed: signer_token left out"
    return None


def signer_names() -> tuple[list[str], list[str]]:
    """The signer systems that can run here, and notes on those that cannot."""
    reason = token_unavailable()
    return (["signer_file"], [reason]) if reason else (list(SIGNER_SYSTEMS), [])


def _run(argv: Sequence[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} {argv[1]} failed: {done.stderr[-300:]}")


def prepare(
    name: str, key: SecretKey, info: dict[str, Any], scratch: Path
) -> tuple[Path, dict[str, str]]:
    """The signer's folder, key (a file, or a token with the key imported) and YAML; the YAML's
    path and the environment of its process. Before the phases: blocking is fine."""
    folder = scratch / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    env = {**os.environ}
    if name == "signer_token":
        module = next(m for m in SOFTHSM_MODULES if Path(m).exists())
        (folder / "tokens").mkdir()
        conf = folder / "softhsm2.conf"
        conf.write_text(f"directories.tokendir = {folder / 'tokens'}\nobjectstore.backend = file\n")
        env |= {"SOFTHSM2_CONF": str(conf), PIN_VAR: "246810"}
        _run(["softhsm2-util", "--init-token", "--free", "--label", "bench",
              "--so-pin", "135790", "--pin", env[PIN_VAR]], env)  # fmt: skip
        _run([sys.executable, "-m", "solver.cli", "keys", "import", "--pkcs11", module,
              "--token", "bench", "--label", "quoting", "--pin-env", PIN_VAR,
              "--key-env", "BENCH_IMPORT_KEY"],
             {**env, "BENCH_IMPORT_KEY": key.to_text()})  # fmt: skip
        key_spec: dict[str, Any] = {
            "pkcs11": {"module": module, "token_label": "bench", "key_label": "quoting",
                       "pin_env": PIN_VAR}
        }  # fmt: skip
    else:
        key_spec = {"key_file": str(write_secret_key(key, folder / "signer.key"))}
    huge = {"per_request": str(10**36), "per_hour": str(10**38)}
    config = {
        "account": key.public_key.implicit_account_id(),
        "verifier_contract": info["verifier_contract"],
        "socket": str(folder / "signer.sock"),
        "audit_log": str(folder / "audit.jsonl"),
        "chain_rpc_url": info["chain_rpc"],
        "key": key_spec,
        "policy": {"quote_caps": {t: huge for t in (USDC, NEAR, ETH)}},
    }
    path = folder / "signer.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, env


async def start_signer(
    name: str, key: SecretKey, info: dict[str, Any], scratch: Path
) -> tuple[Child, Path]:
    """``solver signer serve`` for ``key``'s implicit account; its child and socket."""
    path, env = prepare(name, key, info, scratch)
    argv = [sys.executable, "-m", "solver.cli", "signer", "serve", "--config", str(path)]
    child = await start_child(f"{name}-signer", argv, scratch / f"{name}_signer.log", env=env,
                              stdout_pipe=True, cwd=ROOT)  # fmt: skip
    assert child.process.stdout is not None
    line = await asyncio.wait_for(child.process.stdout.readline(), READY_TIMEOUT_S)
    if not line.startswith(b"signer ready"):
        raise RuntimeError(f"{name}: the signer did not start (see {child.log_path})")
    return child, path.parent / "signer.sock"


def remote_overrides(socket: Path) -> dict[str, Any]:
    return {"signer.mode": "remote", "signer.socket": str(socket), "account.key_env": None}


# ---------------------------------------------------------------------------- the report


def figures(runs: Sequence[dict[str, Any]], systems: Sequence[str]) -> dict[str, dict[str, Any]]:
    """system -> the medians over the repeats that issue 28 asks for."""

    def med(phase: str, system: str, pick: Any) -> float | None:
        values = [pick(r) for r in runs if r["phase"] == phase and r["system"] == system]
        values = [v for v in values if v is not None]
        return round(median(values), 2) if values else None

    out: dict[str, dict[str, Any]] = {}
    for s in systems:
        out[s] = {
            "saturation_answers_per_s": med("saturation", s, lambda r: r["answers_per_s"]),
            "p99_ms_at_500": med("rate_500", s, lambda r: r["latency_ms"].get("p99")),
            "p99_ms_at_2000": med("rate_2000", s, lambda r: r["latency_ms"].get("p99")),
            "answered_share_at_2000": med(
                "rate_2000", s, lambda r: r["answered"] / r["sent"] if r["sent"] else None
            ),
            "cpu_us_per_answer_bot": med("saturation", s, lambda r: r["cpu_us_per_answer"]),
            "cpu_us_per_answer_incl_signer": med(
                "saturation",
                s,
                lambda r: r.get("cpu_us_per_answer_incl_signer", r["cpu_us_per_answer"]),
            ),
        }
    return out


def section(r: dict[str, Any]) -> list[str]:
    table = r.get("issue28_signers")
    if not table:
        return []
    rows = [[s, *[_fmt(v) for v in table[s].values()]] for s in table]
    header = ["system", "saturation answers/s", "p99 ms at 500/s", "p99 ms at 2,000/s",
              "answered at 2,000/s", "CPU µs/answer (bot)",
              "CPU µs/answer (bot + signer)"]  # fmt: skip
    notes = r["setup"].get("signer_notes") or []
    return [
        "## Issue 28: the remote signer beside the in-process one",
        "",
        md_table(header, rows),
        "",
        "Medians over the repeats. `signer_file` / `signer_token`: the same bot with "
        "`signer.mode: remote` (batch_max 256, timeout 250 ms), the key in `solver signer "
        "serve` from a key file / a SoftHSM2 token (one session, a worker thread).",
        *[f"- {note}" for note in notes],
        "",
    ]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if isinstance(value, float) and value < 10 else f"{value:,.0f}"
