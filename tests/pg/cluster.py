"""A real PostgreSQL server for the tests: one cluster per session, one database per test.

``initdb`` refuses to run as root, so when the tests run as root the cluster belongs to the
``postgres`` user, in a directory of its own under /tmp (pytest's temporary directories are
private to root). The server listens on a free loopback port and on a Unix socket in the same
directory. Absent binaries skip the tests with the reason printed (:data:`SKIP_REASON`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

BIN = Path(os.environ.get("SOLVER_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
PASSWORD = "test-" + uuid.uuid4().hex[:12]
PASSWORD_ENV = "SOLVER_TEST_PG_PASSWORD"


def _skip_reason() -> str | None:
    if not (BIN / "initdb").is_file() or not (BIN / "pg_ctl").is_file():
        return f"PostgreSQL tests skipped: no initdb/pg_ctl in {BIN} (set SOLVER_TEST_PG_BIN)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "PostgreSQL tests skipped: running as root and no postgres user to run initdb"
    return None


SKIP_REASON = _skip_reason()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    port: int
    home: Path
    options: str = ""
    """The server's options (``pg_ctl -o``): the same at every start."""
    user: str = "solver"

    def url(self, database: str) -> str:
        """No password in the URL: it comes from :data:`PASSWORD_ENV`, like the bot's."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(
            f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres",
            password=PASSWORD,
            autocommit=True,
        )

    def new_database(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def terminate(self, database: str, pid: int | None = None) -> int:
        """``pg_terminate_backend`` of the connections to ``database`` (only those of the bot
        process ``pid``, by the name each store connection carries); how many."""
        sql = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
        params: tuple[object, ...] = (database,)
        if pid is not None:
            sql += " AND application_name LIKE %s"
            params = (database, f"solver %:{pid}:%")
        with self.admin() as conn:
            return len(conn.execute(sql, params).fetchall())

    def _pg_ctl(self, *args: str) -> None:
        done = subprocess.run(
            _as_owner([str(BIN / "pg_ctl"), "-D", str(self.home / "data"), *args]),
            check=False, capture_output=True, cwd=self.home, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)}: exit {done.returncode}: {done.stderr}")

    def start(self) -> None:
        """Start the server (``-w``: it returns once the server accepts connections)."""
        self._pg_ctl("-o", self.options, "-l", str(self.home / "log"), "-w", "-t", "60", "start")
        self.ready()

    def stop(self) -> None:
        """Stop the server the way an operator or a package upgrade does (``-m fast``: its
        sessions are ended, their transactions rolled back); returns once it is down."""
        self._pg_ctl("-m", "fast", "-w", "-t", "60", "stop")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every session ended, the server back on the same port;
        returns once it accepts connections again."""
        self._pg_ctl("-o", self.options, "-l", str(self.home / "log"), "-m", "fast", "-w",
                     "-t", "60", "restart")  # fmt: skip
        self.ready()

    def ready(self, timeout_s: float = 30) -> None:
        """Wait until the server takes a connection (``pg_ctl -w`` can return a little early)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.admin().close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def running(self) -> bool:
        """Whether the server is up (``pg_ctl status``)."""
        status = subprocess.run(
            _as_owner([str(BIN / "pg_ctl"), "-D", str(self.home / "data"), "status"]),
            check=False, capture_output=True, cwd=self.home,
        )  # fmt: skip
        return status.returncode == 0


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def running_cluster() -> Iterator[Cluster]:
    """initdb, start, yield, stop (fast), remove."""
    home = Path(tempfile.mkdtemp(prefix="solver-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(home, pw.pw_uid, pw.pw_gid)
    data = home / "data"
    pwfile = home / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
    port = _free_port()
    subprocess.run(
        _as_owner([str(BIN / "initdb"), "-D", str(data), "-U", "solver", "-A", "scram-sha-256",
                   f"--pwfile={pwfile}", "--no-sync", "-E", "UTF8", "--locale=C"]),
        check=True, capture_output=True, cwd=home,
    )  # fmt: skip
    options = (
        f"-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={home} "
        "-c fsync=off -c synchronous_commit=on -c full_page_writes=off -c max_connections=60 "
        "-c shared_buffers=32MB"
    )
    cluster = Cluster(port, home, options)
    try:
        cluster.start()
        yield cluster
    finally:
        subprocess.run(
            _as_owner([str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            check=False, capture_output=True, cwd=home,
        )  # fmt: skip
        shutil.rmtree(home, ignore_errors=True)
