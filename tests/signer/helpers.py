"""Real parts for the signer's tests (issue 28): a SoftHSM2 token in a temp dir, and a
``solver signer serve`` child process on a Unix socket.

The token is made with Debian's ``softhsm2-util --init-token`` under its own ``softhsm2.conf``,
and the known test key is put into it with ``solver keys import --pkcs11`` (a child process: a
PKCS#11 library reads its configuration once per process, so the test process never loads it).
Without SoftHSM2 or python-pkcs11 the token tests are skipped with :data:`TOKEN_SKIP_REASON`,
which the session's header and summary print.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from solver.protocol.keys import SecretKey

MODULE_CANDIDATES = (
    "/usr/lib/softhsm/libsofthsm2.so",
    "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
    "/usr/local/lib/softhsm/libsofthsm2.so",
)
TEST_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
"""RFC 8032's first test vector: a key everyone knows, made only for tests."""
TEST_KEY = SecretKey(TEST_SEED)
PIN_VAR = "SIGNER_TEST_PIN"
TEST_PIN = "483920"
SO_PIN = "778812"
TOKEN_LABEL = "solver-test"
KEY_LABEL = "quoting"
READY_TIMEOUT_S = 20.0


def softhsm_module() -> str | None:
    return next((path for path in MODULE_CANDIDATES if Path(path).exists()), None)


def token_skip_reason() -> str | None:
    """Why the token tests cannot run here, or None."""
    if shutil.which("softhsm2-util") is None:
        return "SoftHSM2 is not installed (apt-get install softhsm2): PKCS#11 tests skipped"
    if softhsm_module() is None:
        return "libsofthsm2.so not found in " + ", ".join(MODULE_CANDIDATES)
    if importlib.util.find_spec("pkcs11") is None:
        return "python-pkcs11 is not installed (pip install -e '.[dev]'): PKCS#11 tests skipped"
    return None


TOKEN_SKIP_REASON = token_skip_reason()


def cli(
    args: list[str], env: Mapping[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``solver ARGS`` as a child process."""
    return subprocess.run(
        [sys.executable, "-m", "solver.cli", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Token:
    """A SoftHSM2 token in a temp dir, the test key imported under :data:`KEY_LABEL`."""

    module: str
    conf: Path
    env: dict[str, str]
    """The environment of every child that uses the token (SOFTHSM2_CONF, the PIN)."""

    def key_spec(self, key_label: str = KEY_LABEL, **extra: Any) -> dict[str, Any]:
        return {
            "pkcs11": {
                "module": self.module,
                "token_label": TOKEN_LABEL,
                "key_label": key_label,
                "pin_env": PIN_VAR,
                **extra,
            }
        }

    def keys(
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``solver keys ARGS --pkcs11 … --token … --pin-env …`` against this token."""
        return cli(
            [
                "keys",
                *args,
                "--pkcs11",
                self.module,
                "--token",
                TOKEN_LABEL,
                "--pin-env",
                PIN_VAR,
            ],
            env if env is not None else self.env,
        )


def make_token(root: Path) -> Token:
    """Init a token under ``root`` and import :data:`TEST_KEY` into it."""
    module = softhsm_module()
    assert module is not None
    tokens = root / "tokens"
    tokens.mkdir(parents=True)
    conf = root / "softhsm2.conf"
    conf.write_text(
        f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n"
    )
    env = {
        **os.environ,
        "SOFTHSM2_CONF": str(conf),
        PIN_VAR: TEST_PIN,
        "TEST_KEY_VAR": TEST_KEY.to_text(),
    }
    subprocess.run(
        ["softhsm2-util", "--init-token", "--free", "--label", TOKEN_LABEL,
         "--so-pin", SO_PIN, "--pin", TEST_PIN],
        env=env, check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    token = Token(module, conf, env)
    done = token.keys("import", "--label", KEY_LABEL, "--key-env", "TEST_KEY_VAR")
    assert done.returncode == 0, done.stderr
    del env["TEST_KEY_VAR"]  # the signer's children never see the seed
    return token


def signer_yaml(
    path: Path,
    *,
    account: str,
    verifier: str,
    key: Mapping[str, Any],
    quote_caps: Mapping[str, Mapping[str, Any]],
    chain_rpc_url: str | None = None,
    intents: Mapping[str, Any] | None = None,
    quote_max_deadline_ms: int = 120_000,
) -> Path:
    """A signer YAML beside its socket and audit log."""
    body: dict[str, Any] = {
        "account": account,
        "verifier_contract": verifier,
        "socket": str(path.parent / "signer.sock"),
        "audit_log": str(path.parent / "audit.jsonl"),
        "key": dict(key),
        "policy": {
            "quote_max_deadline_ms": quote_max_deadline_ms,
            "quote_caps": {t: dict(c) for t, c in quote_caps.items()},
            "intents": dict(intents or {}),
        },
    }
    if chain_rpc_url is not None:
        body["chain_rpc_url"] = chain_rpc_url
        body["salt_refresh_ms"] = 300
    path.write_text(yaml.safe_dump(body))
    return path


@dataclass
class SignerProcess:
    process: subprocess.Popen[str]
    socket: Path
    audit: Path
    public_key: str

    def stop(self, sig: int = signal.SIGTERM) -> str:
        """Stop it by its pid; its stderr."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        assert self.process.stderr is not None and self.process.stdout is not None
        err = self.process.stderr.read()
        self.process.stderr.close()
        self.process.stdout.close()
        return err

    def audit_lines(self) -> list[dict[str, Any]]:
        import orjson

        if not self.audit.exists():
            return []
        return [orjson.loads(line) for line in self.audit.read_bytes().splitlines() if line]


def start_signer(config: Path, env: Mapping[str, str]) -> SignerProcess:
    """``solver signer serve --config CONFIG``, once it prints that it is ready."""
    process = subprocess.Popen(
        [sys.executable, "-m", "solver.cli", "signer", "serve", "--config", str(config)],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        line = process.stdout.readline()  # blocks until the line or the process's end
        if not line.startswith("signer ready"):
            raise AssertionError(f"the signer did not start: {line!r}")
        _, _, public_key, socket = line.split()
        body = yaml.safe_load(config.read_text())
    except BaseException:
        process.kill()  # never left running behind a failed start
        _, err = process.communicate(timeout=5)
        process.stdout.close()
        if process.stderr is not None:
            process.stderr.close()
        raise AssertionError(f"the signer did not start: {err}") from None
    return SignerProcess(process, Path(socket), Path(body["audit_log"]), public_key)


@contextmanager
def running_signer(config: Path, env: Mapping[str, str]) -> Iterator[SignerProcess]:
    signer = start_signer(config, env)
    try:
        yield signer
    finally:
        signer.stop()
