"""Reading the bot's YAML: a strict parser (unique keys, errors with line and column but never the
line's text), overrides, validation; and loading the signing key the config names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from solver.config.bot import BotConfig, validate_bot_config
from solver.config.overrides import apply_overrides
from solver.config.problems import BotConfigError
from solver.config.secrets import redact
from solver.config.sections import AccountSpec
from solver.errors import ConfigError
from solver.io.key_files import load_secret_key
from solver.protocol.ids import is_implicit_account
from solver.protocol.keys import SecretKey


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # an unhashable key: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {redact(str(key))!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text; an error gives the line and column but never the line's text."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = ": ".join(p for p in (exc.context, exc.problem) if p)
        raise BotConfigError(source, [redact(f"invalid YAML: {where}{what}")]) from None
    except yaml.YAMLError:
        raise BotConfigError(source, ["invalid YAML"]) from None


def load_bot_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> BotConfig:
    """Read, override (dotted keys, see :func:`apply_overrides`) and validate a YAML file.

    Raises :class:`BotConfigError` (a :class:`ConfigError`) listing every problem with its
    YAML path, or :class:`ConfigError` when the file cannot be read.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{file} is not UTF-8 text") from None
    data = parse_yaml(text, str(file))
    if overrides:
        if not isinstance(data, Mapping):
            raise BotConfigError(str(file), ["(top level): must be a mapping of keys"])
        data = apply_overrides(data, overrides)
        try:
            return validate_bot_config(data, source=str(file))
        except BotConfigError as exc:
            raise exc.with_overrides(list(overrides)) from None
    return validate_bot_config(data, source=str(file))


# ----------------------------------------------------------------------------- the signing key


def load_signing_key(account: AccountSpec) -> SecretKey:
    """Load the account's secret key from its source; errors name the source, not the key.

    For an implicit account (64 hex) the key must be the account's own.
    """
    if account.key_env is not None:
        where = "account.key_env"
        try:
            key = load_secret_key(env=account.key_env)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {redact(str(exc))}") from None
    else:
        where = "account.key_file"
        try:
            key = load_secret_key(path=account.key_file)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {redact(str(exc))}") from None
    if is_implicit_account(account.id) and key.public_key.implicit_account_id() != account.id:
        raise ConfigError(
            f"account.id: {account.id} is an implicit account, but the key from {where} is "
            f"{key.public_key.to_text()}, whose implicit account is "
            f"{key.public_key.implicit_account_id()}"
        )
    return key
