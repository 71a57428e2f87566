"""``solver history`` and ``solver store export``: the store read from the command line."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from solver.cli import main
from solver.cli.history import format_amount, parse_pair, parse_since
from solver.config import TokenSpec
from solver.core.clock import SECOND, from_micros, micros
from solver.core.facts import FillPrices, QuotesLost
from solver.core.lifecycle import QuoteState
from solver.errors import ConfigError
from solver.io.store.sqlite_store import Store
from tests.cli.helpers import KEY_VAR, assert_one_line_error, run_solver
from tests.config.helpers import minimal, write_yaml
from tests.io.store_helpers import (
    ACCOUNT,
    ETH,
    U128_MAX,
    USDC,
    WNEAR,
    append_quotes,
    move,
    signed_quote,
)

NOW = datetime.now(UTC)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store with three quotes (one two hours old) and a fill for each settled one."""
    path = tmp_path / "var" / "solver.sqlite"
    quotes = [
        signed_quote("old", at=NOW - timedelta(hours=2)),
        signed_quote("recent", at=NOW - timedelta(minutes=5), amount_in=1_500_000),
        signed_quote("eth", at=NOW - timedelta(minutes=1), asset_in=ETH, asset_out=USDC),
    ]
    with Store(path, account=ACCOUNT) as store:
        append_quotes(store, *quotes)
        for tracked, _, _ in quotes[:2]:
            at = from_micros(tracked.created_at + 2 * SECOND)
            prices = FillPrices(1.0, 3.25, 0.42)
            move(store, tracked.quote_id, QuoteState.WON, at, intent_hash=f"i-{tracked.quote_id}")
            tx_hash = f"tx-{tracked.quote_id}"
            move(store, tracked.quote_id, QuoteState.SETTLED, at, tx_hash=tx_hash, fill=prices)
        store.project()
    return path


@pytest.fixture
def config(tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(KEY_VAR, raising=False)  # the key is never needed
    data = minimal()
    data["storage"] = {"path": str(db)}
    return write_yaml(tmp_path / "bot.yaml", data)


def test_fills_as_json_keep_exact_amounts(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["history", "--config", str(config), "--format", "json"], capsys)
    assert (code, err) == (0, "")
    rows: list[dict[str, Any]] = orjson.loads(out)
    assert [r["quote_id"] for r in rows] == ["recent", "old"]  # newest first
    old = rows[1]
    assert old["amount_in"] == str(U128_MAX) and old["amount_out"] == str(U128_MAX - 1)
    assert (old["price_out_usd"], old["realized_pnl_usd"]) == ("3.25", "0.42")
    assert old["tx_hash"] == "tx-old" and old["markouts"] == {}
    assert old["intent_hash"] == "i-old" and old["price_in_usd"] == "1.0"


def test_quotes_as_csv_with_since_and_pair(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["history", "--config", str(config), "--kind", "quotes", "--format", "csv"]
    code, out, _ = run([*argv, "--since", "-1h"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["quote_id"], r["state"]) for r in rows] == [("eth", "OPEN"), ("recent", "SETTLED")]
    assert rows[1]["amount_in"] == "1500000"

    code, out, _ = run([*argv, "--pair", "wnear/USDC"], capsys)  # symbols, either direction
    assert [r["quote_id"] for r in csv.DictReader(io.StringIO(out))] == ["recent", "old"]
    code, out, _ = run([*argv, "--pair", f"{ETH}/{USDC}", "--limit", "5"], capsys)
    assert [r["quote_id"] for r in csv.DictReader(io.StringIO(out))] == ["eth"]
    code, out, _ = run([*argv, "--limit", "1"], capsys)
    assert [r["quote_id"] for r in csv.DictReader(io.StringIO(out))] == ["eth"]


def test_an_empty_result_is_a_header_or_an_empty_list(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    future = (NOW + timedelta(days=1)).isoformat()
    argv = ["history", "--config", str(config), "--since", future]
    code, out, _ = run([*argv, "--format", "csv"], capsys)
    assert code == 0 and out.startswith("at,quote_id,asset_in,") and len(out.splitlines()) == 1
    code, out, _ = run([*argv, "--format", "json"], capsys)
    assert (code, out) == (0, "[]\n")
    code, out, _ = run(argv, capsys)
    assert code == 0 and "no fills" in out


def test_the_table_shows_whole_units_with_symbols(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["history", "--config", str(config)], capsys)
    assert (code, err) == (0, "")
    assert "fills, all time, newest first" in out
    assert "recent" in out and "old" in out
    assert "1.5 USDC" in out  # 1_500_000 with 6 decimals
    assert "0.42" in out and "tx-old" in out

    code, out, _ = run(["history", "--config", str(config), "--kind", "quotes"], capsys)
    assert code == 0 and "OPEN" in out and "SETTLED" in out and "eth" in out


def test_db_overrides_the_config_and_works_alone(
    tmp_path: Path, config: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.sqlite"
    Store(other).close()
    code, out, _ = run(
        ["history", "--config", str(config), "--db", str(other), "--format", "json"], capsys
    )
    assert (code, out) == (0, "[]\n")
    code, out, _ = run(["history", "--db", str(db), "--format", "json"], capsys)
    assert code == 0 and len(orjson.loads(out)) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["history"], "give --config FILE"),
        (["history", "--db", "{tmp}/absent.sqlite"], "no store at"),
        (["history", "--db", "{db}", "--since", "yesterday"], "--since 'yesterday'"),
        (["history", "--db", "{db}", "--pair", "USDC"], "--pair 'USDC'"),
        (["store", "export", "--db", "{tmp}/absent.sqlite", "--table", "quotes", "--format", "csv"],
         "no store at"),
    ],
)  # fmt: skip
def test_bad_input_is_one_error_line(
    tmp_path: Path,
    db: Path,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [a.format(tmp=tmp_path, db=db) for a in argv]
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert message in err


def test_store_export_writes_csv_to_a_file_and_jsonl_to_stdout(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "fills.csv"
    argv = ["store", "export", "--db", str(db), "--table", "fills", "--format", "csv"]
    code, out, err = run([*argv, "--out", str(out_file)], capsys)
    assert (code, out, err) == (0, "", "")
    with out_file.open(encoding="utf-8", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert {r["quote_id"] for r in rows} == {"old", "recent"}
    assert {r["amount_in"] for r in rows} == {str(U128_MAX), "1500000"}

    argv = ["store", "export", "--db", str(db), "--table", "transitions", "--format", "jsonl"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    moves = [orjson.loads(line) for line in out.splitlines()]
    assert [(m["quote_id"], m["new"]) for m in moves] == [
        ("old", "WON"),
        ("old", "SETTLED"),
        ("recent", "WON"),
        ("recent", "SETTLED"),
    ]


def test_the_installed_script_has_the_commands(db: Path) -> None:
    result = run_solver(["history", "--db", str(db), "--kind", "quotes", "--format", "json"])
    assert result.returncode == 0, result.stderr
    assert [r["quote_id"] for r in orjson.loads(result.stdout)] == ["eth", "recent", "old"]


# ------------------------------------------------------------------------------ pure helpers


def test_parse_since() -> None:
    assert parse_since("-1h", NOW) == NOW - timedelta(hours=1)
    assert parse_since("-24h", NOW) == NOW - timedelta(hours=24)
    assert parse_since("30m", NOW) == NOW - timedelta(minutes=30)
    assert parse_since("-1.5d", NOW) == NOW - timedelta(hours=36)
    assert parse_since("2025-01-31T12:00:00Z", NOW) == datetime(2025, 1, 31, 12, tzinfo=UTC)
    assert parse_since("2025-01-31T12:00:00", NOW) == datetime(2025, 1, 31, 12, tzinfo=UTC)
    with pytest.raises(ConfigError):
        parse_since("-1y", NOW)


def test_parse_pair_and_format_amount() -> None:
    tokens = {
        USDC: TokenSpec(symbol="USDC", decimals=6),
        WNEAR: TokenSpec(symbol="wNEAR", decimals=24),
    }
    assert parse_pair("wNEAR/USDC", tokens) == (WNEAR, USDC)
    assert parse_pair(f"{USDC}/{WNEAR}", tokens) == (USDC, WNEAR)
    assert parse_pair("nep141:a.near/nep141:b.near", {}) == ("nep141:a.near", "nep141:b.near")
    with pytest.raises(ConfigError):
        parse_pair("a/b/c", tokens)
    assert format_amount("1500000", USDC, tokens) == "1.5 USDC"
    assert format_amount("3000000", USDC, tokens) == "3 USDC"
    assert (
        format_amount(str(U128_MAX), WNEAR, tokens)
        == "340,282,366,920,938.463463374607431768211455 wNEAR"
    )
    assert format_amount("7", ETH, tokens) == f"7 {ETH}"


def test_totals_per_pair_from_quotes_and_fills(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both directions of a pair count together, named as configured; amounts stay exact."""
    argv = ["history", "--config", str(config), "--kind", "pairs", "--format", "json"]
    code, out, err = run(argv, capsys)
    assert (code, err) == (0, "")
    rows = {row["pair"]: row for row in orjson.loads(out)}
    near = rows["wNEAR/USDC"]  # the configured pair (base wNEAR), though quotes were USDC->wNEAR
    assert (near["quotes"], near["won"], near["win_rate"], near["settled"]) == (2, 2, 1.0, 2)
    assert near["fills"] == 2
    assert near["received"] == {USDC: str(U128_MAX + 1_500_000)}
    assert near["paid"] == {WNEAR: str(2 * (U128_MAX - 1))}
    assert near["realized_pnl_usd"] == "0.84"
    # ETH/USDC is not a configured pair: its assets in sorted order; quoted, never won.
    eth = rows["ETH/USDC"]
    assert (eth["quotes"], eth["won"], eth["win_rate"], eth["fills"]) == (1, 0, 0.0, 0)
    assert eth["volume_usd"] == "0"

    code, out, _ = run([*argv, "--since", "-1h"], capsys)
    near = {row["pair"]: row for row in orjson.loads(out)}["wNEAR/USDC"]
    assert (near["quotes"], near["fills"]) == (1, 1)  # the two-hour-old one is out
    assert near["received"] == {USDC: "1500000"}
    assert near["volume_usd"] == "1.5"  # 1.5 USDC at 1 USD

    code, out, _ = run(["history", "--config", str(config)], capsys)
    assert code == 0 and "totals per pair, all time" in out
    line = next(row for row in out.splitlines() if "wNEAR/USDC" in row)
    assert "100.0%" in line and "+0.84" in line


def test_sampled_lost_quotes_are_said_and_weighed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store keeping 1 lost quote in 10 (issue 29): the quotes listed carry their weight, the
    outputs say the rate, and the totals count every quote."""
    path = tmp_path / "sampled.sqlite"
    quotes = [signed_quote(f"q{i}", at=NOW - timedelta(minutes=3)) for i in range(60)]
    with Store(path, account=ACCOUNT, lost_quote_sample_rate=0.1) as store:
        append_quotes(store, *quotes)
        move(store, "q0", QuoteState.WON, NOW, intent_hash="i-q0")
        lost = tuple(q[0].quote_id for q in quotes[1:])
        store.journal.append(QuotesLost(lost, micros(NOW), "expired"))
        store.project()
        kept = {q for q in lost if store.quote_rows.sampled(q)}
    assert 0 < len(kept) < 20
    argv = ["history", "--db", str(path), "--kind", "quotes", "--limit", "100"]
    code, out, err = run([*argv, "--format", "json"], capsys)
    assert code == 0 and err.startswith("note: lost quotes are sampled at rate 0.1: a lost row")
    rows = orjson.loads(out)
    assert {(r["quote_id"], r["state"], r["weight"]) for r in rows} == {
        ("q0", "WON", 1.0),
        *((q, "LOST", 10.0) for q in kept),
    }
    code, out, err = run(argv, capsys)
    assert code == 0 and err == "" and "sampled at rate 0.1" in " ".join(out.split())
    code, out, _ = run(
        ["history", "--db", str(path), "--kind", "pairs", "--format", "json"], capsys
    )
    (pair,) = orjson.loads(out)
    assert (pair["quotes"], pair["won"]) == (60, 1)

    export = ["store", "export", "--db", str(path), "--format", "jsonl"]
    code, out, err = run([*export, "--table", "quotes"], capsys)
    assert code == 0 and "sampled at rate 0.1" in err and len(out.splitlines()) == 1 + len(kept)
    code, out, err = run([*export, "--table", "quote_counts"], capsys)
    counts = [orjson.loads(line) for line in out.splitlines()]
    assert err == "" and {(c["state"], c["n"]) for c in counts} == {("WON", 1), ("LOST", 59)}
