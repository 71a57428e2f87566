"""What a reader must know before trusting a replay: the warnings shown first.

A replay's figures are only as good as what went in. Two things can make them wrong without
any figure looking odd (issue 25): data that did not all arrive (malformed lines skipped, a
stream that ends early), and competition that was not observed (a request without a recorded
competitor is won or lost by a model, not by the record). Both are said in one place, here, so
the report's banner (:mod:`backtest.report.html`) and the command's stderr say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FIRST_LINES_SHOWN = 5
"""Malformed line numbers named on stderr and in the banner; ``summary.json`` keeps them all
(up to the reader's cap, :data:`backtest.stream.format.MAX_MALFORMED_KEPT`)."""

UNOBSERVED_FILLS_WARN = 0.2
"""Warn when more than this share of fills came from requests without an observed competitor:
their outcome is the competition model's, not the record's."""


NO_MODEL_WARN = 0.05
"""Warn when more than this share of answers had no competitor to race (none observed yet, no
prior): a stream that does not say it sought no competition, and records none."""


def data_quality(stream: Mapping[str, Any]) -> list[str]:
    """One sentence per problem with the stream as read: truncation, malformed lines."""
    out: list[str] = []
    truncated = stream.get("truncated")
    if truncated:
        out.append(
            f"the stream ended early ({truncated}): {stream.get('lines', 0):,} lines read; "
            "the rest of the period is missing"
        )
    total = int(stream.get("malformed_lines") or 0)
    if total:
        listed = stream.get("malformed") or []
        first = ", ".join(str(line) for line, _ in listed[:FIRST_LINES_SHOWN])
        more = " …" if total > FIRST_LINES_SHOWN else ""
        reason = f" (line {listed[0][0]}: {listed[0][1]})" if listed else ""
        out.append(
            f"{total:,} malformed stream line{'s' if total != 1 else ''} skipped: "
            f"line{'s' if total != 1 else ''} {first}{more}{reason}; all in summary.json"
        )
    return out


def competition(figures: Mapping[str, Any]) -> list[str]:
    """A sentence when the fills rest on competition nobody observed."""
    comp = figures.get("competition")
    if not comp or not comp.get("decided"):
        return []
    out: list[str] = []
    no_model = int((figures.get("lost") or {}).get("unobserved_no_model", 0))
    if no_model > NO_MODEL_WARN * comp["decided"]:
        out.append(
            f"{no_model:,} of {comp['decided']:,} answers were lost for want of a competition "
            f"model ({comp['observed']:,} competitors observed, no prior): set "
            "fill.unobserved.prior"
        )
    share = comp.get("fills_unobserved_share")
    if share is not None and share > UNOBSERVED_FILLS_WARN:
        out.append(
            f"{share:.0%} of fills came from requests without an observed competitor "
            f"(coverage {comp['coverage']:.0%}, unobserved: {comp['unobserved']}); "
            "their outcome is the model's, not the record's"
        )
    return out


def warnings(figures: Mapping[str, Any]) -> list[str]:
    """Everything a reader must see first, data quality then competition."""
    return data_quality(figures.get("stream") or {}) + competition(figures)
