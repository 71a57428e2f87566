"""The ``shadow`` section: how ``solver run --shadow`` paper-trades (docs/paper-trading.md).

In shadow mode nothing is signed or sent, so nobody can take our answers and no competitor's
answer is seen. Which answers a user *would* have taken is decided by the backtest's models
(:mod:`backtest.fills`, :mod:`backtest.takers`): the taker's price limit first, then the
competition — ``logistic`` (a win probability from the edge given to the user, ``a`` and ``b``
as ``solver backtest calibrate`` fits them) or ``always`` (every answer within the taker's
limit wins: an upper bound). ``competitor`` is not offered: live, no competing answer is known.

``fill`` has the shape of the backtest settings' ``fill`` section, so a calibration's output can
be pasted here. The fields mirror :class:`backtest.settings.FillSpec` (the configuration does
not import the backtest) but for ``unobserved`` and ``race`` (the ``competitor`` model's); a
test holds the two in step.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from solver.config.fields import STRICT


class ShadowTakerSpec(BaseModel):
    """The simulated user's price limit (:class:`backtest.settings.TakerSpec`)."""

    model_config = STRICT
    kind: Literal["fixed", "lognormal"] = "lognormal"
    tolerance_bps: Annotated[float, Field(ge=0, le=5_000, allow_inf_nan=False)] = 60.0
    """The limit (``fixed``) or its median (``lognormal``), in bps of what the user pays."""
    sigma: Annotated[float, Field(ge=0, le=3, allow_inf_nan=False)] = 0.5
    max_bps: Annotated[float, Field(ge=0, le=5_000, allow_inf_nan=False)] = 500.0
    """No user accepts an answer worse than this, whatever the draw."""


class ShadowFillSpec(BaseModel):
    """Which shadow quotes a simulated user takes (:class:`backtest.settings.FillSpec`)."""

    model_config = STRICT
    model: Literal["always", "logistic"] = "logistic"
    a: Annotated[float, Field(allow_inf_nan=False)] = 0.0
    """Log-odds of winning at zero edge."""
    b: Annotated[float, Field(allow_inf_nan=False)] = 0.05
    """Change of the log-odds per basis point of edge given to the user."""
    fitted: Literal["competition", "joint"] = "competition"
    """What ``a`` and ``b`` describe: the race alone (the taker applied first) or, fitted from
    a store, taker and race together (the taker not applied again)."""
    taker: ShadowTakerSpec = Field(default_factory=ShadowTakerSpec)


class ShadowSpec(BaseModel):
    """Paper trading in shadow mode: the fill models, their seed, what the status keeps."""

    model_config = STRICT
    fill: ShadowFillSpec = Field(default_factory=ShadowFillSpec)
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0
    """Seeds the logistic model's draws and the taker limits (same seed, same users)."""
    recent_fills: Annotated[int, Field(ge=0, le=1_000)] = 20
    """Simulated fills kept for the status (newest first)."""
