"""The signer's audit log: one JSON line per signature and per refusal (issue 28; STYLE 14).

What was signed (the quote's id and hash, or the message), when, under which nonce and for which
outflow; and each refusal with its rule. Lines of one batch are written together and flushed
before its answers leave, so a signature that left is in the log. The file is opened append-only
and owner-only; it holds no secret.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson


class AuditLog:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._fd = fd
        self._lines: list[bytes] = []
        self.path = path

    def add(self, entry: dict[str, Any]) -> None:
        self._lines.append(orjson.dumps(entry) + b"\n")

    def flush(self) -> None:
        """Write what was added, in one ``write``, before the answers leave."""
        if self._lines:
            data, self._lines = b"".join(self._lines), []
            os.write(self._fd, data)

    def close(self) -> None:
        self.flush()
        os.close(self._fd)
