"""``report.html``: one self-contained page a person reads after a replay.

Sections, in order (each documented in ``docs/backtest.md``, "The report"): a banner for what
a reader must know before trusting the figures (:mod:`backtest.report.trust`: data that did not
all arrive, fills from unobserved competition); a banner when the kill switch halted the
replay; what ran (strategies, parameters, digests, settings); the headline figures; PnL and
inventory over time; PnL against the hold benchmark; per pair; statistics with their sample
sizes; breakdowns per hour, day and week; markouts; win rates by edge and size; inventory;
outcomes (lost, skipped, refused) and skips over time; latency; and every figure of
``summary.json``.

Amounts a person reads are in whole units with the token's symbol (:mod:`backtest.units`);
``summary.json`` keeps the smallest units. Plots are PNGs embedded as base64, so the file can be
mailed or checked in and opens anywhere without the run's directory.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from backtest.measure.measurements import HORIZONS_S
from backtest.replay_result import ReplayResult
from backtest.report import plots, trust
from backtest.report.tables import halted_note, markout_groups
from backtest.units import format_whole

SECTIONS = (
    "What ran",
    "Headline",
    "PnL and inventory",
    "Against holding",
    "Per pair",
    "Statistics",
    "Breakdown",
    "Markouts",
    "Win rate by edge and size",
    "Inventory",
    "Outcomes",
    "Latency",
    "All figures",
)
"""The ``<h2>`` of every section, in order (the tests check the example report has each)."""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #222; }
table { border-collapse: collapse; font-size: 0.88em; margin: 0.5em 0 1em; }
th, td { text-align: left; padding: 0.2em 0.7em; border-bottom: 1px solid #ddd;
  vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { font-weight: 600; white-space: nowrap; background: #f6f6f6; }
.warning { border: 2px solid #b60; background: #fff4e0; padding: 0.6em 1em; margin: 1em 0; }
.halted { border: 2px solid #b00; background: #fee; padding: 0.6em 1em; margin: 1em 0; }
.note { color: #555; font-size: 0.88em; }
img { max-width: 100%; }
pre { font-size: 0.8em; background: #f6f6f6; padding: 1em; overflow-x: auto; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def money(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def count(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def when(text: str | None) -> str:
    if not text:
        return "—"
    return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M:%S UTC")


def table(head: Sequence[str], rows: Iterable[Sequence[Any]], numeric_from: int = 1) -> str:
    """A table; columns from ``numeric_from`` on are right-aligned."""
    out = ["<table><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr>"]
    for row in rows:
        cells = (
            f'<td class="n">{_e(v)}</td>' if i >= numeric_from else f"<td>{_e(v)}</td>"
            for i, v in enumerate(row)
        )
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "".join(out)


def pairs_table(figures: Mapping[str, Any]) -> str:
    head = ["pair", "requests", "quoted", "won", "win rate", "volume USD", "realized USD",
            *(f"markout +{h}s USD" for h in HORIZONS_S), "realized bps", "+300s bps"]  # fmt: skip
    rows = []
    for name, p in [*figures["pairs"].items(), ("all pairs", figures["all"])]:
        rows.append(
            [name, count(p["requests"]), count(p["quoted"]), count(p["won"]), pct(p["win_rate"]),
             money(p["volume_usd"]), money(p["realized_usd"]),
             *(money(p["markouts_usd"][f"{h}s"]) for h in HORIZONS_S),
             num(p["realized_bps"]["mean"]), num(p["markouts_bps"]["300s"]["mean"])]
        )  # fmt: skip
    return table(head, rows)


def markouts_table(figures: Mapping[str, Any]) -> str:
    a = figures["all"]
    cells = [("fill (realized)", a["realized_bps"], figures["realized_pnl_usd"])]
    for h in HORIZONS_S:
        cells.append(
            (f"+{h} s", a["markouts_bps"][f"{h}s"], figures["markouts_usd"][f"{h}s"]["total"])
        )
    rows = [
        [
            label,
            count(c["n"]),
            num(c["mean"]),
            num(None if c["se"] is None else 1.96 * c["se"]),
            money(total),
        ]
        for label, c, total in cells
    ]
    return table(["horizon", "fills", "mean bps", "± 95 % bps", "total USD"], rows)


def markouts_by_competition(figures: Mapping[str, Any]) -> str:
    """Mean markout (bps, ± 95 %) per horizon for the fills whose competitor was observed and
    for the others, and for informed and uninformed flow when the stream labels it: a gap
    between the two is flow the record did not see, or adverse selection."""
    rows = []
    for label, stats in markout_groups(figures):
        cells = [stats["realized_bps"], *(stats["markouts_bps"][f"{h}s"] for h in HORIZONS_S)]
        rows.append(
            [
                label,
                count(cells[0]["n"]),
                *(
                    "—"
                    if c["mean"] is None
                    else f"{num(c['mean'])} ± {num(None if c['se'] is None else 1.96 * c['se'])}"
                    for c in cells
                ),
            ]
        )
    head = ["fills", "n", "at the fill", *(f"+{h} s" for h in HORIZONS_S)]
    note = (
        ""
        if (figures.get("by_flow") or {}).get("labelled")
        else _note(
            "The stream does not label informed requests (only synthetic streams can): no split "
            "by informed flow."
        )
    )
    return table(head, rows) + note


def inventory_table(
    figures: Mapping[str, Any], symbols: Mapping[str, str], decimals: Mapping[str, int]
) -> str:
    rows = []
    for asset in sorted(set(figures["start_inventory"]) | set(figures["final_inventory"])):
        start, final = (
            int(figures["start_inventory"].get(asset, 0)),
            int(figures["final_inventory"].get(asset, 0)),
        )
        d, sym = decimals.get(asset, 0), symbols.get(asset, asset)
        rows.append(
            [
                sym,
                format_whole(start, d, sym),
                format_whole(final, d, sym),
                format_whole(final - start, d, sym),
            ]
        )
    return table(["token", "start", "end", "change"], rows)


def _counts(title: str, counts: Mapping[str, int]) -> str:
    if not counts:
        return f"<p>{_e(title)}: none.</p>"
    rows = [[k, count(v)] for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return f"<h3>{_e(title)}</h3>" + table(["reason", "count"], rows)


def _img(name: str, data: str) -> str:
    return f'<img alt="{_e(name)}" src="data:image/png;base64,{data}">'


def _note(text: str) -> str:
    return f'<p class="note">{_e(text)}</p>'


def latency_setting(spec: Mapping[str, Any]) -> str:
    """The latency model in words, with only the figures its kind uses (a ``fixed`` model has
    a ``median_ms`` too, its unused default, which read as if it applied)."""
    if spec["kind"] == "fixed":
        return f"fixed {num(spec['ms'], 1)} ms"
    return f"lognormal, median {num(spec['median_ms'], 1)} ms, sigma {num(spec['sigma'])}"


def _what_ran(figures: Mapping[str, Any]) -> list[str]:
    config = figures.get("config")
    if not config:
        return ["<p>Not recorded (a report made without the config).</p>"]
    rows = [
        [p["pair"], p["strategy"], json.dumps(p["params"], sort_keys=True)] for p in config["pairs"]
    ]
    bt = config["backtest"]
    settings = [
        ["bot config digest", config["digest"]],
        ["backtest settings digest", config["backtest_digest"]],
        ["fill model", json.dumps(bt["fill"], sort_keys=True)],
        ["latency", latency_setting(bt["latency"])],
        ["settlement delay", f"{bt['settlement_delay_ms']} ms"],
        ["kill switch", "on" if bt["kill_switch"] else "off (--no-kill-switch)"],
        ["risk limits", json.dumps(config["risk"], sort_keys=True)],
        ["stream", figures.get("stream", {}).get("file", "—")],
    ]
    return [
        table(["pair", "strategy", "parameters"], rows, numeric_from=9),
        table(["setting", "value"], settings, numeric_from=9),
    ]


def _headline(figures: Mapping[str, Any], note: str | None) -> str:
    split, dd, ratios = figures["pnl_split"], figures["drawdown"], figures["daily_ratios"]
    recovered = when(dd["recovered_at"]) if dd["recovered_at"] else "not by the end"
    drawdown = (
        f"{money(dd['usd'])} USD: peak {when(dd['peak_at'])}, "
        f"trough {when(dd['trough_at'])}, recovered {recovered}"
    )
    counts = " / ".join(count(figures[k]) for k in ("requests", "quoted", "won"))
    sharpe = ratios["withheld"] or (
        f"{num(ratios['sharpe'])} / {num(ratios['sortino'])} over {ratios['span_days']:.1f} days"
    )
    risk = f"{money(figures['inventory_risk_usd'])} / {money(figures['max_inventory_risk_usd'])}"
    equity = f"{money(figures['start_equity_usd'])} / {money(figures['end_equity_usd'])}"
    rows = [
        ["requests / quoted / won", counts],
        ["win rate (won / quoted)", pct(figures["win_rate"])],
        ["volume", f"{money(figures['volume_usd'])} USD"],
        ["PnL, marked to market", f"{money(figures['pnl_usd'])} USD"],
        ["of which spread capture (before fees)", f"{money(split['spread_capture_usd'])} USD"],
        ["of which fees", f"{money(split['fees_usd'])} USD"],
        ["of which inventory revaluation", f"{money(split['inventory_revaluation_usd'])} USD"],
        ["hold (the starting inventory, held)", f"{money(figures['hold_pnl_usd'])} USD"],
        ["PnL over hold", f"{money(figures['pnl_over_hold_usd'])} USD"],
        ["max drawdown", drawdown],
        ["Sharpe / Sortino (daily PnL, × √365)", sharpe],
        ["inventory risk (mean / peak)", f"{risk} USD"],
        ["equity start / end", f"{equity} USD"],
        ["halted", note or "no"],
    ]
    return table(["figure", "value"], rows, numeric_from=9)


def _latency(result: ReplayResult, figures: Mapping[str, Any]) -> list[str]:
    lat = figures["latency_ms"]
    keys = ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms")
    row = [count(lat["n"]), *(num(lat[k], 1) for k in keys)]
    head = ["requests", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms"]
    return [table(head, [row], numeric_from=0), _img("Latency", plots.latency(result))]


def render_html(
    result: ReplayResult, figures: Mapping[str, Any], symbols: Mapping[str, str], title: str
) -> str:
    from backtest.report import stats_html  # it builds on this module's tables

    span = f"{when(figures.get('first_ts'))} to {when(figures.get('last_ts'))}"
    parts = [
        f"<h1>{_e(title)}</h1>",
        _note(f"Stream time {span}; fill model {figures['fill_model']}, seed {figures['seed']}."),
    ]
    for message in trust.warnings(figures):
        parts.append(
            f'<div class="warning"><strong>Before trusting this:</strong> {_e(message)}</div>'
        )
    note = halted_note(figures)
    halted_at = None
    if note is not None:
        parts.append(f'<div class="halted"><strong>Halted.</strong> Replay {_e(note)}</div>')
        halted_at = datetime.fromisoformat(figures["halted"]["at"]).timestamp()
    sections: dict[str, list[str]] = {
        "What ran": _what_ran(figures),
        "Headline": [_headline(figures, note)],
        "PnL and inventory": [
            _img("PnL and inventory", plots.pnl_and_inventory(result, symbols, halted_at)),
            _note(
                "Spread earned: the realized edge of the fills at fill time. Inventory "
                "revaluation: marked PnL minus spread earned. Inventory in whole units."
            ),
        ],
        "Against holding": stats_html.against_holding(figures),
        "Per pair": [
            pairs_table(figures),
            _note(
                "A pair's PnL is what its fills earned: realized edge at fill time and the "
                "markouts of those fills. Inventory revaluation beyond the last horizon belongs "
                "to the balances and is not attributed to a pair."
            ),
        ],
        "Statistics": stats_html.statistics(figures),
        "Breakdown": stats_html.breakdown(figures),
        "Markouts": [
            markouts_table(figures),
            markouts_by_competition(figures),
            _img("Markouts", plots.markouts(figures)),
        ],
        "Win rate by edge and size": [_img("Win rates", plots.win_rates(result))],
        "Inventory": [inventory_table(figures, symbols, result.desk.pnl.decimals)],
        "Outcomes": [
            _counts("Skipped by the desk", figures["skips"]),
            _counts("Lost (fill model)", figures["lost"]),
            _counts("Refused by the ledger at settlement", figures["settle_failed"]),
            _img("Outcomes over time", plots.outcomes_over_time(figures)),
        ],
        "Latency": _latency(result, figures),
        "All figures": [
            "<details><summary>summary.json</summary><pre>"
            + _e(json.dumps(figures, sort_keys=True, indent=1))
            + "</pre></details>"
        ],
    }
    assert tuple(sections) == SECTIONS
    for name, content in sections.items():
        parts.append(f"<h2>{_e(name)}</h2>")
        parts.extend(content)
    body = "\n".join(parts)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>{STYLE}</style></head>
<body>
{body}
</body></html>
"""
