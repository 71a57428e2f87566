"""The bot's configuration: shipped files load; every problem is reported with its YAML path;
secrets are refused without being repeated; overrides; the signing-key check."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, get_args

import orjson
import pydantic
import pytest

from solver.config import (
    BotConfig,
    BotConfigError,
    StaticPriceSource,
    apply_overrides,
    find_secrets,
    load_bot_config,
    load_signing_key,
    parse_yaml,
    redacted_dump,
    validate_bot_config,
)
from solver.errors import ConfigError
from solver.io.key_files import write_secret_key
from solver.protocol.keys import SecretKey
from tests.config.helpers import (
    DEFAULT_YAML,
    ETH,
    EXAMPLES,
    USDC,
    WNEAR,
    minimal,
    paths_of,
    problems_of,
    write_yaml,
)

# ------------------------------------------------------------------------------ shipped files


def test_examples_exist() -> None:
    names = {path.name for path in EXAMPLES}
    assert {"amm.yaml", "inventory_skew.yaml"} <= names


@pytest.mark.parametrize("path", [DEFAULT_YAML, *EXAMPLES], ids=lambda p: p.name)
def test_shipped_configs_load(path: Path) -> None:
    config = load_bot_config(path)
    assert config.verifier_contract == "intents.sandbox"
    assert set(config.tokens) == {USDC, WNEAR, ETH}
    assert config.pairs
    assert orjson.dumps(redacted_dump(config))


def test_default_yaml_has_the_documented_values() -> None:
    config = load_bot_config(DEFAULT_YAML)
    assert config.account.key_env is not None and config.account.key_file is None
    assert config.bus.ws_url == "ws://127.0.0.1:8760/ws"
    assert (config.bus.wait_ms, config.bus.max_frame_bytes) == (3000, 1 << 20)
    assert config.tokens[USDC].decimals == 6
    assert (config.tokens[WNEAR].symbol, config.tokens[WNEAR].decimals) == ("wNEAR", 24)
    assert config.tokens[ETH].decimals == 18
    assert [(p.base, p.quote, p.strategy, p.params) for p in config.pairs] == [
        (WNEAR, USDC, "spread", {"spread_bps": 25}),
        (ETH, USDC, "spread", {"spread_bps": 25}),
    ]
    source = config.prices.sources[0]
    assert source.kind == "sandbox" and source.url == "http://127.0.0.1:8762/prices"
    assert config.risk.floors[USDC] == 1_000_000_000


def test_example_strategy_params() -> None:
    amm = load_bot_config(EXAMPLES[[p.name for p in EXAMPLES].index("amm.yaml")])
    assert {p.strategy for p in amm.pairs} == {"amm"}
    assert amm.pairs[0].params == {"margin_bps": 30}
    skew_path = EXAMPLES[[p.name for p in EXAMPLES].index("inventory_skew.yaml")]
    skew = load_bot_config(skew_path)
    assert {p.strategy for p in skew.pairs} == {"inventory_skew"}
    params = skew.pairs[0].params
    assert {k: params[k] for k in ("gamma", "min_spread_bps", "max_spread_bps", "horizon_s")} == {
        "gamma": 50,
        "min_spread_bps": 10,
        "max_spread_bps": 200,
        "horizon_s": 3600,
    }
    assert params["targets"] == {WNEAR: 0.5, USDC: 0.5}


def _field_names(model: type[pydantic.BaseModel]) -> set[str]:
    names = set()
    for name, field in model.model_fields.items():
        names.add(name)
        for arg in (field.annotation, *get_args(field.annotation)):
            for inner in (arg, *get_args(arg)):
                if isinstance(inner, type) and issubclass(inner, pydantic.BaseModel):
                    names |= _field_names(inner)
    return names


def test_default_yaml_documents_every_key() -> None:
    """Every key of the schema is named in default.yaml, and each key line has a comment."""
    text = DEFAULT_YAML.read_text(encoding="utf-8")
    names = _field_names(BotConfig) | {"static", "sandbox", "http_json", "bus_quote"}
    missing = sorted(name for name in names if not re.search(rf"\b{name}\b", text))
    assert missing == []
    lines = text.splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        match = re.match(r"( *)([a-z_]+):(\s|$)", line)
        if match is None or len(match.group(1)) > 2:
            continue  # not a key line, or inside a list item (documented above the list)
        if "#" not in line and not lines[i - 1].lstrip().startswith("#"):
            undocumented.append(line)
    assert undocumented == []


# ----------------------------------------------------------------------------------- defaults


def test_minimal_config_takes_the_defaults() -> None:
    config = validate_bot_config(minimal())
    assert config.bus.asset_field_prefix == "core"
    assert (config.bus.reconnect_initial_ms, config.bus.reconnect_max_ms) == (250, 10_000)
    assert (config.chain.timeout_ms, config.chain.balance_refresh_ms) == (2000, 2000)
    assert (config.chain.balance_max_age_ms, config.chain.salt_refresh_ms) == (15_000, 10_000)
    assert config.nonce.layout == "salted"
    assert (config.prices.max_age_ms, config.prices.history_size) == (10_000, 512)
    assert config.risk.max_open_exposure_usd == 50_000
    assert config.risk.max_quotes_per_s == 200
    assert config.risk.max_reconciliation_mismatch == {}
    assert config.quote.deadline_margin_ms == 5000
    assert config.quote.max_min_deadline_ms == 120_000
    assert config.quote.response_budget_ms == 2500
    assert config.quote.strategy_budget_ms == 5.0
    assert str(config.storage.path) == "var/solver.sqlite"
    assert config.metrics.listen == "127.0.0.1:9464"
    assert (config.log.level, config.log.format, config.log.summary_every_s) == ("INFO", "text", 10)
    pair = config.pairs[0]
    assert (pair.enabled, pair.directions, pair.min_notional_usd) == (True, "both", 0.0)


def test_models_are_frozen() -> None:
    config = validate_bot_config(minimal())
    with pytest.raises(pydantic.ValidationError):
        config.bus.wait_ms = 1


def test_amounts_accept_quoted_strings_and_ints() -> None:
    data = minimal()
    data["risk"] = {"floors": {USDC: "1000000", WNEAR: 5 * 10**24}}
    config = validate_bot_config(data)
    assert config.risk.floors == {USDC: 1_000_000, WNEAR: 5 * 10**24}
    assert redacted_dump(config)["risk"]["floors"][WNEAR] == str(5 * 10**24)


def test_every_source_kind_validates() -> None:
    data = minimal()
    data["prices"]["sources"] = [
        {"kind": "static", "prices": {USDC: 1.0}},
        {"kind": "sandbox", "url": "http://127.0.0.1:8762/prices"},
        {
            "kind": "http_json",
            "url": "https://example.com/p",
            "asset": ETH,
            "json_path": "data.price",
            "headers_env": "PRICE_HEADERS",
        },
        {"kind": "bus_quote", "asset": WNEAR, "quote_asset": USDC, "probe_amount": "10" + "0" * 24},
    ]
    config = validate_bot_config(data)
    assert [s.kind for s in config.prices.sources] == [
        "static",
        "sandbox",
        "http_json",
        "bus_quote",
    ]
    assert isinstance(config.prices.sources[0], StaticPriceSource)
    assert redacted_dump(config)["prices"]["sources"][2]["headers_env"] == "$PRICE_HEADERS"


def test_log_level_and_nonce_layout_ignore_case() -> None:
    data = minimal()
    data["log"] = {"level": "debug", "format": "JSON"}
    data["nonce"] = {"layout": "Versioned"}
    config = validate_bot_config(data)
    assert (config.log.level, config.log.format, config.nonce.layout) == (
        "DEBUG",
        "json",
        "versioned",
    )


def test_metrics_can_be_disabled() -> None:
    data = minimal()
    data["metrics"] = {"listen": None}
    assert validate_bot_config(data).metrics.listen is None
    data["metrics"] = {"listen": "[::1]:9000"}
    assert validate_bot_config(data).metrics.listen == "[::1]:9000"
    data["metrics"] = {"listen": "localhost"}
    assert paths_of(data) == ["metrics.listen"]


# ------------------------------------------------------------------------ errors, with paths


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ((), "colour"),
        (("account",), "account.colour"),
        (("bus",), "bus.colour"),
        (("pairs", 0), "pairs.0.colour"),
        (("prices", "sources", 0), "prices.sources.0.colour"),
        (("tokens", USDC), f"tokens.{USDC}.colour"),
    ],
)
def test_unknown_key_anywhere_is_reported_with_its_path(
    where: tuple[str | int, ...], expected: str
) -> None:
    data = minimal()
    node: Any = data
    for part in where:
        node = node[part]
    node["colour"] = "blue"
    problems = problems_of(data)
    assert len(problems) == 1
    assert problems[0].startswith(f"{expected}: unknown key")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("account", "id"), "account.id"),
        (("bus",), "bus"),
        (("bus", "ws_url"), "bus.ws_url"),
        (("chain", "rpc_url"), "chain.rpc_url"),
        (("tokens",), "tokens"),
        (("pairs", 0, "max_notional_usd"), "pairs.0.max_notional_usd"),
        (("prices", "sources"), "prices.sources"),
        (("verifier_contract",), "verifier_contract"),
    ],
)
def test_missing_required_key_is_reported_with_its_path(
    path: tuple[str | int, ...], expected: str
) -> None:
    data = minimal()
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    problems = problems_of(data)
    assert f"{expected}: Field required" in problems


@pytest.mark.parametrize(
    "set_amount",
    [
        lambda d: d.setdefault("risk", {}).setdefault("floors", {}).__setitem__(USDC, 1000.5),
        lambda d: (
            d.setdefault("risk", {}).setdefault("max_open_per_token", {}).__setitem__(USDC, 1e6)
        ),
    ],
)
def test_float_amount_is_refused_with_its_path(set_amount: Any) -> None:
    data = minimal()
    set_amount(data)
    problems = problems_of(data)
    assert len(problems) == 1
    path, message = problems[0].split(": ", 1)
    assert path in {f"risk.floors.{USDC}", f"risk.max_open_per_token.{USDC}"}
    assert "quoted" in message and "float" in message


def test_float_probe_amount_is_refused_with_its_path() -> None:
    data = minimal()
    data["prices"]["sources"].append(
        {"kind": "bus_quote", "asset": WNEAR, "quote_asset": USDC, "probe_amount": 1.5e24}
    )
    assert paths_of(data) == ["prices.sources.1.probe_amount"]


def test_pair_asset_not_in_tokens() -> None:
    data = minimal()
    data["pairs"][0]["quote"] = "nep141:dai.sandbox"
    assert problems_of(data) == ["pairs.0.quote: nep141:dai.sandbox is not in tokens"]


def test_other_asset_references_must_be_in_tokens() -> None:
    data = minimal()
    doge = "nep141:doge.sandbox"
    data["risk"] = {"floors": {doge: "1"}, "max_reconciliation_mismatch": {doge: "1"}}
    data["prices"]["sources"].append({"kind": "static", "prices": {doge: 0.1}})
    assert sorted(paths_of(data)) == [
        f"prices.sources.1.prices.{doge}",
        f"risk.floors.{doge}",
        f"risk.max_reconciliation_mismatch.{doge}",
    ]


@pytest.mark.parametrize("reverse", [False, True])
def test_duplicate_pair(reverse: bool) -> None:
    data = minimal()
    second = dict(data["pairs"][0])
    if reverse:
        second["base"], second["quote"] = second["quote"], second["base"]
    data["pairs"].append(second)
    assert problems_of(data) == ["pairs.1: duplicate pair: same assets as pairs.0"]


@pytest.mark.parametrize(
    ("section", "key", "value", "path"),
    [
        ("nonce", "layout", "random", "nonce.layout"),
        ("log", "level", "LOUD", "log.level"),
        ("log", "format", "xml", "log.format"),
        ("pairs", "directions", "sideways", "pairs.0.directions"),
        ("pairs", "enabled", "maybe", "pairs.0.enabled"),
    ],
)
def test_bad_enum_value(section: str, key: str, value: str, path: str) -> None:
    data = minimal()
    if section == "pairs":
        data["pairs"][0][key] = value
    else:
        data[section] = {key: value}
    assert paths_of(data) == [path]


def test_unknown_price_source_kind() -> None:
    data = minimal()
    data["prices"]["sources"].append({"kind": "oracle", "url": "http://x"})
    problems = problems_of(data)
    assert len(problems) == 1
    assert problems[0].startswith("prices.sources.1: ") and "'kind'" in problems[0]


def test_source_field_error_path_has_no_union_tag() -> None:
    data = minimal()
    data["prices"]["sources"][0]["refresh_ms"] = -5
    assert paths_of(data) == ["prices.sources.0.refresh_ms"]


@pytest.mark.parametrize(
    "account",
    [
        {"id": "solver.sandbox", "key_env": "A", "key_file": "a.key"},
        {"id": "solver.sandbox"},
        {"id": "solver.sandbox", "key_env": None, "key_file": None},
    ],
    ids=["both", "neither", "both-null"],
)
def test_exactly_one_key_source(account: dict[str, Any]) -> None:
    data = minimal()
    data["account"] = account
    problems = problems_of(data)
    assert len(problems) == 1
    assert problems[0].startswith("account: give exactly one of key_env")


def test_key_source_is_checked_even_when_account_has_other_errors() -> None:
    data = minimal()
    data["account"] = {"id": "Not An Id", "key_env": "A", "key_file": "a.key"}
    assert sorted(paths_of(data)) == ["account", "account.id"]


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("bus", "wait_ms"), 3001, "bus.wait_ms"),
        (("bus", "ws_url"), "http://127.0.0.1/ws", "bus.ws_url"),
        (("bus", "rpc_url"), "not a url", "bus.rpc_url"),
        (("bus", "api_key_env"), "has spaces", "bus.api_key_env"),
        (("tokens", USDC, "decimals"), 39, f"tokens.{USDC}.decimals"),
        (("pairs", 0, "max_notional_usd"), 0, "pairs.0.max_notional_usd"),
        (("pairs", 0, "min_notional_usd"), -1, "pairs.0.min_notional_usd"),
        (("pairs", 0, "strategy"), "not valid!", "pairs.0.strategy"),
        (("pairs", 0, "base"), "nep141:", "pairs.0.base"),
        (("verifier_contract",), "UPPER", "verifier_contract"),
        (("quote", "deadline_margin_ms"), -1, "quote.deadline_margin_ms"),
    ],
)
def test_field_errors_carry_their_path(
    path: tuple[str | int, ...], value: Any, expected: str
) -> None:
    data = minimal()
    node: Any = data
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    node[path[-1]] = value
    assert paths_of(data) == [expected]


@pytest.mark.parametrize(
    ("chain", "age_s"),
    [
        ({}, 20.0),  # twice the default salt_refresh_ms (10 s)
        ({"salt_refresh_ms": 4000}, 8.0),
        ({"salt_refresh_ms": 4000, "salt_max_age_ms": 4000}, 4.0),
        ({"salt_max_age_ms": 45_000}, 45.0),
        ({"salt_max_age_ms": None}, 20.0),
    ],
)
def test_salt_max_age_defaults_to_twice_the_refresh_period(
    chain: dict[str, Any], age_s: float
) -> None:
    data = minimal()
    data["chain"].update(chain)
    assert validate_bot_config(data).chain.salt_max_age_s == age_s


def test_salt_max_age_below_the_refresh_period_is_refused() -> None:
    data = minimal()
    data["chain"].update(salt_refresh_ms=10_000, salt_max_age_ms=9_999)
    assert problems_of(data) == [
        "chain: salt_max_age_ms must be at least salt_refresh_ms, "
        "or the salt goes stale between refreshes"
    ]


def test_salt_max_age_follows_an_overridden_refresh_period() -> None:
    """The default is resolved when read, not stored: overriding the refresh moves it too."""
    config = validate_bot_config(minimal()).with_overrides(chain__salt_refresh_ms=30_000)
    assert config.chain.salt_max_age_s == 60.0


def test_strategy_may_be_a_module_path() -> None:
    data = minimal()
    data["pairs"][0]["strategy"] = "tests.strategies.broken:Raising"
    data["pairs"][0]["params"] = {"message": "kaput"}
    assert validate_bot_config(data).pairs[0].strategy == "tests.strategies.broken:Raising"


@pytest.mark.parametrize(
    ("strategy", "params", "expected"),
    [
        ("spread", {"spread_bps": -1}, ["pairs.0.params.spread_bps: Input should be greater"]),
        ("spread", {"spred_bps": 5}, ["pairs.0.params.spred_bps: unknown key"]),
        ("amm", {"margin_bps": "wide"}, ["pairs.0.params.margin_bps: "]),
        (
            "inventory_skew",
            {"targets": {"nep141:a": 1.5}},
            ["pairs.0.params.targets.nep141:a: Input should be less than or equal to 1"],
        ),
        (
            "inventory_skew",
            {"min_spread_bps": 50, "max_spread_bps": 10},
            ["pairs.0.params: "],  # the strategy config's own cross-field check
        ),
        ("no_such_module.x:Strategy", {}, ["pairs.0.strategy: strategy 'no_such_module.x:"]),
        ("nope", {}, ["pairs.0.strategy: unknown strategy 'nope'"]),
        (
            "tests.config.plugins:RefusesToStart",
            {},
            [
                "pairs.0.params: strategy 'tests.config.plugins:RefusesToStart' refused these "
                "params: RuntimeError"
            ],
        ),
    ],
)
def test_strategy_params_are_validated_with_their_yaml_path(
    strategy: str, params: dict[str, Any], expected: list[str]
) -> None:
    """Loading the config loads each pair's strategy with its params (issue 10): a bad one is a
    problem with its YAML path, found at load time rather than when the bot builds its routes."""
    data = minimal()
    data["pairs"][0].update(strategy=strategy, params=params)
    problems = problems_of(data)
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start), problems


def test_every_pair_s_strategy_is_checked_with_the_other_problems() -> None:
    data = minimal()
    second = {**data["pairs"][0], "base": ETH, "enabled": False}
    second["params"] = {"spread_bps": 20_000}
    data["pairs"].append(second)
    data["pairs"][0]["params"] = {"spred_bps": 5}
    data["bus"]["wait_ms"] = 5000
    assert sorted(paths_of(data)) == [
        "bus.wait_ms",
        "pairs.0.params.spred_bps",
        "pairs.1.params.spread_bps",
    ]


def test_with_overrides_checks_the_strategy_params_again() -> None:
    config = validate_bot_config(minimal())
    with pytest.raises(BotConfigError, match=r"pairs\.0\.params\.spread_bps"):
        config.with_overrides({"pairs.0.params.spread_bps": -5})


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"quote": {"response_budget_ms": 2000}, "bus": {"wait_ms": 1500}},
            "quote.response_budget_ms",
        ),
        ({"chain": {"balance_refresh_ms": 20_000}}, "chain"),
        ({"bus": {"reconnect_initial_ms": 20_000}}, "bus"),
        ({"pairs": {"min_notional_usd": 2000.0}}, "pairs.0"),
    ],
)
def test_settings_that_contradict_each_other(
    change: dict[str, dict[str, Any]], expected: str
) -> None:
    data = minimal()
    for section, values in change.items():
        target = data["pairs"][0] if section == "pairs" else data.setdefault(section, {})
        target.update(values)
    assert paths_of(data) == [expected]


def test_price_source_refreshing_slower_than_max_age() -> None:
    data = minimal()
    data["prices"]["max_age_ms"] = 1000
    assert paths_of(data) == ["prices.sources.0.refresh_ms"]


def test_pair_asset_without_a_price_source() -> None:
    data = minimal()
    data["prices"]["sources"] = [{"kind": "static", "prices": {USDC: 1.0}}]
    problems = problems_of(data)
    assert problems == [f"pairs.0.base: no source in prices.sources gives a price for {WNEAR}"]
    data["pairs"][0]["enabled"] = False
    validate_bot_config(data)


def test_every_error_is_reported_at_once() -> None:
    data = minimal()
    data["colour"] = "blue"
    data["bus"]["wait_ms"] = 9000
    data["nonce"] = {"layout": "random"}
    data["account"]["key_file"] = "also.key"
    data["risk"] = {"floors": {USDC: 1.5}}
    data["pairs"][0]["max_notional_usd"] = -1
    data["pairs"].append(
        {"base": ETH, "quote": "nep141:dai.sandbox", "strategy": "spread", "max_notional_usd": 9}
    )
    data["pairs"].append(dict(data["pairs"][0], max_notional_usd=5))
    assert sorted(paths_of(data)) == sorted(
        [
            "colour",
            "bus.wait_ms",
            "nonce.layout",
            "account",
            f"risk.floors.{USDC}",
            "pairs.0.max_notional_usd",
            "pairs.1.quote",
            "pairs.2",  # duplicate of pairs.0, found although pairs.0 is invalid
        ]
    )


def test_error_message_is_one_line_per_problem_with_the_source(tmp_path: Path) -> None:
    data = minimal()
    data["bus"]["wait_ms"] = 9000
    data["log"] = {"level": "LOUD"}
    path = write_yaml(tmp_path / "bot.yaml", data)
    with pytest.raises(BotConfigError) as caught:
        load_bot_config(path)
    assert isinstance(caught.value, ConfigError)
    lines = str(caught.value).splitlines()
    assert lines == caught.value.lines()
    assert [line.split(": ")[:2] for line in lines] == [
        [str(path), "bus.wait_ms"],
        [str(path), "log.level"],
    ]


def test_yaml_problems(tmp_path: Path) -> None:
    with pytest.raises(BotConfigError, match=r"line 2, column 1: .*duplicate key 'a'"):
        parse_yaml("a: 1\na: 2\n", "s")
    with pytest.raises(BotConfigError, match=r"invalid YAML: line \d+, column \d+: "):
        parse_yaml("a: [1\n", "s")
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(BotConfigError, match="empty"):
        load_bot_config(empty)
    with pytest.raises(BotConfigError, match="must be a mapping"):
        validate_bot_config(["a"])
    with pytest.raises(ConfigError, match="cannot read"):
        load_bot_config(tmp_path / "missing.yaml")


# ------------------------------------------------------------------------------------ secrets


@pytest.fixture
def secret_text() -> str:
    return SecretKey.generate().to_text()


def _assert_refused_quietly(data: Any, secret_text: str, path: str) -> None:
    body = secret_text.removeprefix("ed25519:")
    with pytest.raises(BotConfigError) as caught:
        validate_bot_config(data, source="test")
    text = str(caught.value)
    assert body not in text
    assert body[:20] not in text
    assert any(p.startswith(f"{path}: looks like a secret key") for p in caught.value.problems)
    assert "key_env" in text


@pytest.mark.parametrize(
    ("where", "path"),
    [
        (("account", "secret_key"), "account.secret_key"),
        (("account", "id"), "account.id"),
        (("account", "key_env"), "account.key_env"),
        (("pairs", 0, "params", "note"), "pairs.0.params.note"),
        (("bus", "ws_url"), "bus.ws_url"),
    ],
)
def test_secret_key_in_yaml_is_refused_without_echo(
    secret_text: str, where: tuple[str | int, ...], path: str
) -> None:
    data = minimal()
    node: Any = data
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = secret_text if where[-1] != "ws_url" else f"ws://h/ws?k={secret_text}"
    _assert_refused_quietly(data, secret_text, path)


@pytest.mark.parametrize("name", ["key", "private_key", "secret", "signing_key", "seed"])
def test_key_like_value_under_a_secret_name_is_refused(secret_text: str, name: str) -> None:
    data = minimal()
    bare = secret_text.removeprefix("ed25519:")  # pasted without its prefix
    data["pairs"][0]["params"][name] = bare
    _assert_refused_quietly(data, secret_text, f"pairs.0.params.{name}")


def test_secret_as_a_mapping_key_is_refused(secret_text: str) -> None:
    data = minimal()
    data["tokens"][secret_text] = {"symbol": "X", "decimals": 1}
    _assert_refused_quietly(data, secret_text, "tokens.<redacted>")


def test_secret_in_yaml_file_is_not_echoed_even_when_the_yaml_is_broken(
    tmp_path: Path, secret_text: str
) -> None:
    path = tmp_path / "bot.yaml"
    path.write_text(f'account:\n  id: "{secret_text}\n', encoding="utf-8")
    with pytest.raises(BotConfigError) as caught:
        load_bot_config(path)
    assert secret_text.removeprefix("ed25519:")[:20] not in str(caught.value)


def test_names_and_public_keys_are_not_secrets() -> None:
    data = minimal()
    data["pairs"][0]["params"]["key"] = "short"
    data["pairs"][0]["params"]["public_key"] = SecretKey.generate().public_key.to_text()
    data["account"]["key_env"] = "MY_KEY"
    assert find_secrets(data) == []
    # The spread strategy has no such params: those are the only problems, none a secret.
    assert paths_of(data) == ["pairs.0.params.key", "pairs.0.params.public_key"]
    assert not any("secret" in problem for problem in problems_of(data))


# ---------------------------------------------------------------------------------- overrides


def test_apply_overrides_sets_dotted_keys_on_a_copy() -> None:
    data = minimal()
    result = apply_overrides(
        data,
        {
            "bus.ws_url": "ws://127.0.0.1:9/ws",
            "pairs.0.params.spread_bps": 40,
            "risk.floors[nep141:usdc.sandbox]": "5",
            "log.level": "DEBUG",
        },
    )
    assert result["bus"]["ws_url"] == "ws://127.0.0.1:9/ws"
    assert result["pairs"][0]["params"] == {"spread_bps": 40}
    assert result["risk"] == {"floors": {USDC: "5"}}
    assert result["log"] == {"level": "DEBUG"}
    assert data == minimal()  # the input is untouched


def test_apply_overrides_finds_existing_dotted_keys() -> None:
    result = apply_overrides(minimal(), {"tokens.nep141:usdc.sandbox.decimals": 7})
    assert result["tokens"][USDC] == {"symbol": "USDC", "decimals": 7}


@pytest.mark.parametrize("key", ["pairs.3.enabled", "pairs.x", "bus.ws_url.deeper", "a..b", ""])
def test_apply_overrides_refuses_bad_paths(key: str) -> None:
    with pytest.raises(ConfigError, match="override"):
        apply_overrides(minimal(), {key: 1})


def test_with_overrides_revalidates() -> None:
    config = validate_bot_config(minimal())
    changed = config.with_overrides({"pairs.0.enabled": False}, bus__ws_url="ws://10.0.0.1:1/ws")
    assert changed.bus.ws_url == "ws://10.0.0.1:1/ws"
    assert changed.pairs[0].enabled is False
    assert config.pairs[0].enabled is True
    assert isinstance(changed, BotConfig)
    with pytest.raises(BotConfigError, match=r"overrides: bus\.wait_ms: "):
        config.with_overrides(bus__wait_ms=5000)


def test_load_with_overrides_reports_paths(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "bot.yaml", minimal())
    config = load_bot_config(path, {"prices.max_age_ms": 20_000, "nonce.layout": "versioned"})
    assert (config.prices.max_age_ms, config.nonce.layout) == (20_000, "versioned")
    with pytest.raises(BotConfigError, match=r"nonce\.layout"):
        load_bot_config(path, {"nonce.layout": "odd"})


# ------------------------------------------------------------------------- output, key check


def test_redacted_dump_marks_env_names() -> None:
    data = minimal()
    data["bus"]["api_key_env"] = "BUS_KEY"
    dump = redacted_dump(validate_bot_config(data))
    assert dump["account"]["key_env"] == "$SOLVER_TEST_SIGNING_KEY"
    assert dump["bus"]["api_key_env"] == "$BUS_KEY"
    assert orjson.loads(orjson.dumps(dump)) == dump


def test_load_signing_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    key = SecretKey.generate()
    monkeypatch.setenv("SOLVER_TEST_SIGNING_KEY", key.to_text())
    config = validate_bot_config(minimal())
    assert load_signing_key(config.account).public_key == key.public_key


def test_load_signing_key_errors_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    config = validate_bot_config(minimal())
    monkeypatch.delenv("SOLVER_TEST_SIGNING_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"account\.key_env: .*SOLVER_TEST_SIGNING_KEY"):
        load_signing_key(config.account)
    garbage = "ed25519:" + "z" * 87
    monkeypatch.setenv("SOLVER_TEST_SIGNING_KEY", garbage)
    with pytest.raises(ConfigError) as caught:
        load_signing_key(config.account)
    assert "SOLVER_TEST_SIGNING_KEY" in str(caught.value)
    assert "z" * 20 not in str(caught.value)


def test_load_signing_key_checks_the_implicit_account(monkeypatch: pytest.MonkeyPatch) -> None:
    key, other = SecretKey.generate(), SecretKey.generate()
    monkeypatch.setenv("SOLVER_TEST_SIGNING_KEY", key.to_text())
    data = minimal()
    data["account"]["id"] = key.public_key.implicit_account_id()
    load_signing_key(validate_bot_config(data).account)
    data["account"]["id"] = other.public_key.implicit_account_id()
    with pytest.raises(ConfigError, match=r"^account\.id: "):
        load_signing_key(validate_bot_config(data).account)


def test_load_signing_key_from_an_owner_only_file(tmp_path: Path) -> None:
    key = SecretKey.generate()
    path = write_secret_key(key, tmp_path / "bot.key")
    data = minimal()
    data["account"] = {"id": "solver.sandbox", "key_file": str(path)}
    account = validate_bot_config(data).account
    assert load_signing_key(account).public_key == key.public_key
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match=r"account\.key_file: .*chmod 600"):
        load_signing_key(account)


def test_bare_secret_in_an_id_field_is_not_echoed(secret_text: str) -> None:
    """Without its prefix a key is not recognised as one, but the id error must not quote it."""
    data = minimal()
    data["account"]["id"] = secret_text.removeprefix("ed25519:")
    problems = problems_of(data)
    assert [p.split(": ", 1)[0] for p in problems] == ["account.id"]
    assert secret_text.removeprefix("ed25519:")[:16] not in problems[0]


@pytest.mark.parametrize("days", [0, -1, "ever", float("inf")])
def test_a_retention_that_is_not_a_positive_number_of_days_is_refused(days: Any) -> None:
    data = minimal()
    data["storage"] = {"retain_days": days}
    assert paths_of(data) == ["storage.retain_days"]


def test_retention_is_30_days_unless_said_and_null_keeps_everything() -> None:
    data = minimal()
    assert validate_bot_config(data).storage.retain_days == 30
    data["storage"] = {"retain_days": None}
    assert validate_bot_config(data).storage.retain_days is None
