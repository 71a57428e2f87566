"""The signer's YAML (``solver signer serve --config``) and its secrets (issue 28).

The YAML says where things are (the socket, the key file, the PKCS#11 module, token and key
labels, the audit log) and the policy. Secrets never: the PIN comes from an environment
variable or an owner-only file, as the key file itself does (the ssh rule: a file others can
read is already compromised).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from solver.config.fields import STRICT, EnvName, HttpUrl, Millis
from solver.config.loading import parse_yaml
from solver.config.problems import BotConfigError
from solver.errors import ConfigError
from solver.protocol.ids import AccountId
from solver.signer.policy import PolicySpec


class Pkcs11Spec(BaseModel):
    """A key in a PKCS#11 token."""

    model_config = STRICT
    module: Path
    """The PKCS#11 library, e.g. ``/usr/lib/softhsm/libsofthsm2.so``."""
    token_label: Annotated[str, Field(min_length=1, max_length=32)]
    key_label: Annotated[str, Field(min_length=1, max_length=64)]
    pin_env: EnvName | None = None
    """Environment variable holding the user PIN."""
    pin_file: Path | None = None
    """Owner-only (0600) file holding the user PIN."""

    @model_validator(mode="after")
    def _one_pin_source(self) -> Pkcs11Spec:
        if (self.pin_env is None) == (self.pin_file is None):
            raise PydanticCustomError(
                "pin_source", "give exactly one of pin_env or pin_file (never the PIN itself)"
            )
        return self


class KeySpec(BaseModel):
    """Exactly one source of the key: a key file / environment variable, or a token."""

    model_config = STRICT
    key_env: EnvName | None = None
    key_file: Path | None = None
    pkcs11: Pkcs11Spec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> KeySpec:
        given = [self.key_env, self.key_file, self.pkcs11]
        if sum(value is not None for value in given) != 1:
            raise PydanticCustomError(
                "key_source", "give exactly one of key_env, key_file or pkcs11"
            )
        return self


class SignerConfig(BaseModel):
    """The whole configuration of ``solver signer serve``."""

    model_config = STRICT
    account: AccountId
    """The account whose key this is (the quotes' ``signer_id``)."""
    verifier_contract: AccountId
    """The only recipient the signer signs for."""
    socket: Path
    """The Unix socket it listens on; made owner-only (0600)."""
    key: KeySpec
    audit_log: Path
    """Append-only JSON lines: one per signature and per refusal."""
    chain_rpc_url: HttpUrl | None = None
    """The ledger RPC whose ``current_salt`` the nonce rule checks; None: the salt rule is not
    enforced (a warning at start)."""
    salt_refresh_ms: Millis = 5_000
    policy: PolicySpec = Field(default_factory=PolicySpec)


def load_signer_config(path: str | Path) -> SignerConfig:
    """Read and validate the YAML; problems as ``<file>: <yaml path>: <message>`` lines."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}") from None
    data: Any = parse_yaml(text, str(file))
    try:
        return SignerConfig.model_validate(data)
    except ValidationError as exc:
        problems = [
            ".".join(str(part) for part in error["loc"]) + ": " + error["msg"]
            for error in exc.errors(include_url=False, include_input=False)
        ]
        raise BotConfigError(str(file), problems) from None


def read_owner_only(path: Path, what: str) -> str:
    """A secret's text from a file group and others cannot read; errors never quote it."""
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"{what} {path} must not be readable by group or others (chmod 600)")
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None


def read_pin(spec: Pkcs11Spec, where: str = "key.pkcs11") -> str:
    """The token's user PIN from its environment variable or owner-only file."""
    if spec.pin_env is not None:
        pin = os.environ.get(spec.pin_env, "")
        if not pin:
            raise ConfigError(f"{where}.pin_env: environment variable {spec.pin_env} is not set")
        return pin
    assert spec.pin_file is not None
    pin = read_owner_only(spec.pin_file, "PIN file")
    if not pin:
        raise ConfigError(f"{where}.pin_file: {spec.pin_file} is empty")
    return pin
