"""``solver backtest compare RUN_A RUN_B …``: two or more runs side by side.

Reads each run's ``--out`` directory (:mod:`backtest.report.compare`), prints the summary, per
pair and the settings that differ as plain tables on stdout, and writes ``compare.html`` (with
the equity curves on one plot) and ``compare.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from solver.cli import EXIT_OK
from solver.cli.backtest.streams import Group, add_backtest_command
from solver.errors import ConfigError


def register_compare(group: Group) -> None:
    parser = add_backtest_command(
        group,
        "compare",
        help="compare two or more backtest runs side by side",
        description=(
            "Read the --out directories of 'solver backtest run' and show them side by side: "
            "the summary (PnL, hold, PnL over hold, drawdown, ratios), per pair, and the "
            "settings that differ; write compare.html (with the equity curves on one plot) "
            "and compare.json into --out."
        ),
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories (two or more)")
    parser.add_argument("--out", required=True, metavar="DIR", help="where to write the page")
    parser.set_defaults(handler=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from backtest.report.compare import (
        compare_json,
        config_differences,
        load_runs,
        pair_rows,
        summary_rows,
        text_table,
    )
    from backtest.report.compare_html import render_compare_html
    from backtest.report.outputs import write_json

    runs = load_runs(args.runs)
    names = [run.name for run in runs]
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.html").write_text(render_compare_html(runs), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write into {out}: {exc.strerror}") from None
    write_json(out / "compare.json", compare_json(runs))
    diffs = config_differences(runs)
    sections = [
        text_table(["figure", *names], summary_rows(runs)),
        text_table(["pair", *names], pair_rows(runs)),
        text_table(["setting that differs", *names], diffs) if diffs else "same configuration",
        f"written: {out / 'compare.html'}, {out / 'compare.json'}",
    ]
    print("\n\n".join(sections))
    return EXIT_OK
