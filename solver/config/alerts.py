"""The ``alerts:`` section of the bot's YAML: where alerts go and how often (issue 14).

Kept in a file of its own so the config package can include it as one more concern
(``BotConfig.alerts: AlertsConfig = AlertsConfig()``) without this module knowing the rest of the
schema. Every field has a default that is safe to run with: with no URLs configured, alerts are
still tracked and logged, just not delivered anywhere.

The destinations themselves are secrets (a Telegram bot token, a Slack webhook, an SMTP password
are all *inside* the URL), so, like the signing key, they are never in the file: ``urls_env``
NAMES the environment variable that holds them.

YAML (all keys optional; shown with their defaults)::

    alerts:
      enabled: true                   # false: track and log alerts, deliver nothing
      urls_env: SOLVER_ALERT_URLS     # NAME of the variable with the Apprise URLs
      required: false                 # true: refuse to start without a destination
      name: solver                    # first word of every message title (which bot is this?)
      bus_down_after_s: 60            # a bus outage becomes an alert after this long, s
      burst: 3                        # messages per alert kind sent back to back, count
      per_hour: 12                    # sustained messages per alert kind per hour
      queue_size: 100                 # messages waiting for delivery; more are dropped, count
      send_timeout_s: 20              # one delivery attempt to one destination, s
      retry_delays_s: [2, 10, 60]     # waits before each retry of a failed delivery, s
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = ["AlertsConfig"]

_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _env_name(value: str) -> str:
    if not _ENV_NAME_RE.fullmatch(value):
        # Never echo the value: a pasted URL with its token is the likely cause.
        raise ValueError(
            "must be the NAME of an environment variable (letters, digits, underscore), "
            "not its value"
        )
    return value


class AlertsConfig(BaseModel):
    """Delivery of alerts through Apprise (see :mod:`solver.io.notify`)."""

    # hide_input_in_errors: a URL pasted into urls_env must not be echoed by the error.
    model_config = ConfigDict(
        frozen=True, extra="forbid", allow_inf_nan=False, hide_input_in_errors=True
    )

    enabled: bool = True
    """False: alerts are tracked and logged but sent nowhere (tests, the demo)."""
    urls_env: Annotated[str, AfterValidator(_env_name)] = "SOLVER_ALERT_URLS"
    """NAME of the environment variable holding Apprise URLs, separated by commas or spaces
    (``tgram://TOKEN/CHAT, mailtos://user:pass@example.com``)."""
    required: bool = False
    """True: starting with the variable unset or empty is a configuration error. Set it for
    money-carrying deployments, so a lost variable cannot silence every alert."""
    name: str = Field(default="solver", min_length=1, max_length=64)
    """Prefix of every message title, to tell several bots apart."""
    bus_down_after_s: float = Field(default=60.0, gt=0)
    """Seconds the bus websocket may stay down before ``bus_disconnected`` is raised. Short
    reconnects are normal (relay restarts, deploys) and are not worth waking anyone for."""
    burst: int = Field(default=3, ge=1, le=100)
    """Messages of one alert kind that may go out back to back (token bucket size)."""
    per_hour: float = Field(default=12.0, gt=0, le=3600)
    """Sustained messages per alert kind per hour (token refill rate). Changes beyond this are
    folded into one message that says how many there were, sent when a token is back."""
    queue_size: int = Field(default=100, ge=1, le=10_000)
    """Messages waiting for delivery; further ones are dropped and counted."""
    send_timeout_s: float = Field(default=20.0, gt=0, le=300)
    """Seconds one delivery attempt to one destination may take."""
    retry_delays_s: tuple[Annotated[float, Field(ge=0, le=3600)], ...] = (2.0, 10.0, 60.0)
    """Seconds to wait before each retry of a failed delivery (empty: no retries)."""
