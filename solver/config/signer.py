"""The ``signer:`` section of the bot's YAML: where the quotes are signed (issue 28).

``in_process`` (the default, one box): the account's key is loaded into the bot
(``account.key_env`` / ``key_file``) and signs inline on the event loop (17 µs). ``remote``: the
key is in ``solver signer serve`` behind its policy, reached on an owner-only Unix socket; the
bot holds no key (``account.key_env`` / ``key_file`` must be absent) and never waits for it: a
slow or absent signer makes quotes skip with ``signer_busy`` / ``signer_down``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_core import PydanticCustomError

from solver.config.fields import STRICT, Millis


class SignerLinkSpec(BaseModel):
    model_config = STRICT
    mode: Literal["in_process", "remote"] = "in_process"
    socket: Path | None = None
    """``remote``: the signer's Unix socket (its ``socket:``)."""
    timeout_ms: Millis = 250
    """A batch not answered within this skips with ``signer_busy`` (the relay waits up to
    3000 ms; a quote must also leave inside the request's ``min_deadline_ms``)."""
    batch_max: Annotated[int, Field(ge=1, le=4096)] = 256
    """Most requests in one frame to the signer (a loop turn's requests leave together)."""
    max_in_flight: Annotated[int, Field(ge=1, le=1_000_000)] = 4096
    """Requests waiting for the signer beyond this skip at once with ``signer_busy``."""
    reconnect_ms: Millis = 250
    """Delay between attempts to reach a signer that is gone."""

    @model_validator(mode="after")
    def _socket_when_remote(self) -> SignerLinkSpec:
        if self.mode == "remote" and self.socket is None:
            raise PydanticCustomError("socket", "mode remote needs the signer's socket")
        return self
