"""``solver config``: check the bot's YAML configuration before running it.

``solver config check FILE`` prints the resolved configuration (defaults filled in, overrides
applied) as one JSON line, or every problem on its own ``solver: error: FILE: PATH: ...`` line
with exit code 2. It also loads the signing key from the source the file names, so a missing
variable or a group-readable key file is found now rather than at start; errors name the
variable or file, never the key.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from solver.cli import EXIT_OK, EXIT_USAGE, error_line, print_json
from solver.config import BotConfigError, load_bot_config, load_signing_key, redacted_dump
from solver.config.secrets import redact
from solver.errors import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = subparsers.add_parser(
        "config",
        help="check the bot's configuration",
        description="Check the bot's YAML configuration (see config/default.yaml).",
    )
    commands = config.add_subparsers(title="commands", dest="config_command", metavar="COMMAND")
    commands.required = True

    check = commands.add_parser(
        "check",
        help="validate a config file and print it resolved, as JSON",
        description=(
            "Validate FILE and print the resolved configuration as JSON (environment variable "
            "names shown as $NAME; values are never printed). On errors, print each with its "
            "YAML path, one per line, and exit 2. Also loads the signing key named by "
            "account.key_env / account.key_file unless --no-key-check."
        ),
    )
    check.add_argument("file", metavar="FILE", help="the bot's YAML configuration")
    check.add_argument(
        "--no-key-check",
        action="store_true",
        help="do not load the signing key (check the file alone)",
    )
    add_set_argument(check)
    check.set_defaults(handler=cmd_check)


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (repeatable): dotted overrides of the YAML, the same for ``solver
    config check``, ``solver run`` and ``solver backtest run``."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a dotted key before validation, e.g. bus.ws_url=ws://127.0.0.1:9000/ws "
        "or pairs.0.enabled=false (VALUE is read as YAML; repeatable)",
    )


def overrides_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--set`` overrides given, in order (a key given twice keeps the last value)."""
    return dict(parse_override(text) for text in getattr(args, "overrides", None) or ())


def describe_overrides(overrides: Mapping[str, Any]) -> str:
    """``overrides: risk.max_stale_s=60, pairs.0.enabled=false`` for a start-up line, or
    ``no overrides``; values as YAML flow, secret-shaped text redacted."""
    if not overrides:
        return "no overrides"
    parts = []
    for key, value in overrides.items():
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
        text = text.removesuffix("\n...").strip()
        parts.append(f"{redact(key)}={redact(text)}")
    return "overrides: " + ", ".join(parts)


def parse_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE read as a YAML scalar or flow value (``false``, ``25``, ``[]``)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError("--set takes KEY=VALUE, with a dotted KEY such as bus.ws_url")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise ConfigError(f"--set {key.strip()}: the value is not valid YAML") from None
    return key.strip(), value


def cmd_check(args: argparse.Namespace) -> int:
    overrides = overrides_of(args)
    problems: list[str]
    try:
        config = load_bot_config(args.file, overrides=overrides or None)
    except BotConfigError as exc:
        problems = exc.lines()
    else:
        problems = []
        if not args.no_key_check and config.signer.mode == "in_process":
            try:
                load_signing_key(config.account)
            except ConfigError as exc:
                problems = [f"{args.file}: {exc}"]
        if not problems:
            print_json(redacted_dump(config))
            return EXIT_OK
    for line in problems:
        print(error_line(line), file=sys.stderr)
    return EXIT_USAGE
