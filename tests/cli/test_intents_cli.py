"""``solver intents sign | verify | nonce`` (spec 2.10-2.12, 5.3; protocol-notes 1-3)."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from solver.cli import main
from solver.protocol.encoding import b58encode, b64decode
from solver.protocol.intents import TokenDiff
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import VERSIONED_MAGIC, datetime_to_ns, parse_nonce
from solver.protocol.signing import (
    intent_hash,
    parse_signed,
    secp256k1_address,
    sign_erc191,
    sign_nep413_message,
    verify_signed,
)
from tests.cli.helpers import (
    KEY_VAR,
    SALT_HEX,
    assert_one_line_error,
    make_payload,
    run_solver,
    write_json,
)

ERC191_PRIVATE_KEY = bytes.fromhex(
    "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"
)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_json_line(out: str) -> dict[str, Any]:
    lines = out.splitlines()
    assert len(lines) == 1, out
    value = orjson.loads(lines[0])
    assert isinstance(value, dict)
    return value


def sign(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key_env: str,
    standard: str = "nep413",
    payload: dict[str, Any] | None = None,
) -> dict[str, Any]:
    source = write_json(tmp_path / "payload.json", payload or make_payload())
    code, out, err = run(
        ["intents", "sign", "--key-env", key_env, "--standard", standard, str(source)], capsys
    )
    assert (code, err) == (0, "")
    return one_json_line(out)


def verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], item: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    source = write_json(tmp_path / "signed.json", item)
    code, out, err = run(["intents", "verify", str(source)], capsys)
    assert err == ""
    return code, one_json_line(out)


# ---------------------------------------------------------------------------------- sign/verify


@pytest.mark.parametrize("standard", ["nep413", "raw_ed25519"])
def test_sign_then_verify_round_trip(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key_env: str,
    secret_key: SecretKey,
    standard: str,
) -> None:
    payload = make_payload()
    signed = sign(tmp_path, capsys, key_env, standard, payload)

    assert signed["standard"] == standard
    assert signed["public_key"] == secret_key.public_key.to_text()
    # Independent of the CLI: the protocol layer accepts what it printed.
    verified = verify_signed(parse_signed(signed))
    assert verified.message.signer_id == "solver.near"
    assert verified.recipient == "intents.near"
    assert verified.nonce == b64decode(payload["nonce"])
    assert verified.message.intents == [
        TokenDiff(diff={"nep141:usdc.near": -1_000_000, "nep141:wnear.near": 250_000})
    ]
    if standard == "nep413":
        assert signed["payload"]["recipient"] == "intents.near"
        assert signed["payload"]["nonce"] == payload["nonce"]
        assert "callbackUrl" not in signed["payload"]
        assert signed["payload"]["message"].startswith('{"deadline":"2099-11-22T10:00:00.000Z"')

    code, report = verify(tmp_path, capsys, signed)
    assert code == 0
    assert report == {
        "valid": True,
        "standard": standard,
        "intent_hash": b58encode(intent_hash(parse_signed(signed))),
        "signer_id": "solver.near",
        "public_key": secret_key.public_key.to_text(),
        "key_owner": secret_key.public_key.implicit_account_id(),
        "signer_is_key_owner": False,
        "recipient": "intents.near",
        "deadline": "2099-11-22T10:00:00.000Z",
        "nonce": payload["nonce"],
        "error": None,
    }


def test_sign_reads_stdin_and_implicit_signer_owns_its_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    key_env: str,
    secret_key: SecretKey,
) -> None:
    implicit = secret_key.public_key.implicit_account_id()
    payload = make_payload(signer_id=implicit)
    monkeypatch.setattr("sys.stdin", io.StringIO(orjson.dumps(payload).decode()))
    code, out, err = run(["intents", "sign", "--key-env", key_env], capsys)
    assert (code, err) == (0, "")

    monkeypatch.setattr("sys.stdin", io.StringIO(out))
    code, out, err = run(["intents", "verify", "-"], capsys)
    report = one_json_line(out)
    assert (code, err) == (0, "")
    assert report["signer_id"] == implicit
    assert report["signer_is_key_owner"] is True


def test_sign_with_key_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], secret_key: SecretKey
) -> None:
    key_file = tmp_path / "signing.key"
    key_file.write_text(secret_key.to_text() + "\n")
    key_file.chmod(0o600)
    source = write_json(tmp_path / "payload.json", make_payload())
    code, out, err = run(["intents", "sign", "--key-file", str(key_file), str(source)], capsys)
    assert (code, err) == (0, "")
    assert one_json_line(out)["public_key"] == secret_key.public_key.to_text()


def test_sign_warns_about_what_the_verifier_would_reject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_env: str
) -> None:
    payload = make_payload(
        deadline="2001-01-01T00:00:00Z",
        intents=[{"intent": "token_diff", "diff": {"nep141:usdc.near": "0"}}],
    )
    source = write_json(tmp_path / "payload.json", payload)
    code, out, err = run(["intents", "sign", "--key-env", key_env, str(source)], capsys)
    assert code == 0
    one_json_line(out)
    warnings = err.splitlines()
    assert len(warnings) == 2
    assert all(line.startswith("solver: warning: ") for line in warnings)
    assert "zero delta" in warnings[0]
    assert "deadline has expired" in warnings[1]


@pytest.mark.parametrize("standard", ["nep413", "raw_ed25519"])
def test_verify_detects_a_tampered_message(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key_env: str,
    secret_key: SecretKey,
    standard: str,
) -> None:
    signed = sign(tmp_path, capsys, key_env, standard)
    if standard == "nep413":
        signed["payload"]["message"] = signed["payload"]["message"].replace("250000", "250001")
    else:
        signed["payload"] = signed["payload"].replace("250000", "250001")

    code, report = verify(tmp_path, capsys, signed)
    assert code == 1
    assert report["valid"] is False
    assert report["error"] == "invalid signature"
    assert report["intent_hash"] == b58encode(intent_hash(parse_signed(signed)))
    assert report["signer_id"] == "solver.near"  # still readable from the tampered message
    assert report["public_key"] == secret_key.public_key.to_text()
    assert report["key_owner"] is None


def test_verify_reports_a_signed_message_that_is_not_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], secret_key: SecretKey
) -> None:
    item = sign_nep413_message(secret_key, "not json", bytes(32), "intents.near")
    code, report = verify(tmp_path, capsys, item.model_dump(mode="json", exclude_none=True))
    assert code == 1
    assert report["valid"] is False
    assert report["error"] == "message is not valid JSON"
    assert report["intent_hash"] == b58encode(intent_hash(item))
    assert report["signer_id"] is None


def test_verify_rejects_numbers_in_a_correctly_signed_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], secret_key: SecretKey
) -> None:
    message = '{"deadline":"2099-01-01T00:00:00.000Z","intents":[{"intent":"token_diff",'
    message += '"diff":{"nep141:usdc.near":-5}}],"signer_id":"solver.near"}'
    item = sign_nep413_message(secret_key, message, bytes(32), "intents.near")
    code, report = verify(tmp_path, capsys, item.model_dump(mode="json", exclude_none=True))
    assert code == 1
    assert report["valid"] is False
    assert report["signer_id"] == "solver.near"
    assert report["error"].startswith("invalid message: intents.0.token_diff.diff.nep141:usdc.near")
    assert "decimal string" in report["error"]


def test_verify_reports_a_bad_nep413_nonce_as_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_env: str
) -> None:
    signed = sign(tmp_path, capsys, key_env)
    signed["payload"]["nonce"] = "AAAA"
    code, report = verify(tmp_path, capsys, signed)
    assert code == 1
    assert report["valid"] is False
    assert report["intent_hash"] is None
    assert "nonce" in report["error"]


def test_verify_accepts_erc191(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    address = secp256k1_address(ERC191_PRIVATE_KEY)
    item = sign_erc191(
        ERC191_PRIVATE_KEY,
        signer_id=address,
        verifying_contract="intents.near",
        deadline=datetime(2099, 1, 1, tzinfo=UTC),
        nonce=bytes(32),
        intents=[TokenDiff(diff={"nep141:usdc.near": 5})],
    )
    code, report = verify(tmp_path, capsys, item.model_dump(mode="json"))
    assert code == 0
    assert report["valid"] is True
    assert report["standard"] == "erc191"
    assert report["intent_hash"] == b58encode(intent_hash(item))
    assert report["signer_id"] == address
    assert report["public_key"].startswith("secp256k1:")
    assert report["key_owner"] == address
    assert report["signer_is_key_owner"] is True
    assert report["recipient"] == "intents.near"

    tampered = item.model_dump(mode="json")
    tampered["payload"] = tampered["payload"].replace('"5"', '"6"')
    code, report = verify(tmp_path, capsys, tampered)
    # erc191 has no public key to check against: a changed payload recovers *another* key.
    # The signer is an implicit 0x account, which only its own key signs for: invalid.
    assert code == 1
    assert report["valid"] is False
    assert report["key_owner"] != address
    assert report["signer_is_key_owner"] is False
    assert report["error"] == (
        f"invalid signature: it recovers to {report['key_owner']}, not to the signer "
        f"{address} (an implicit 0x account is signed for by its own key only)"
    )


def test_verify_erc191_named_signer_reports_the_recovered_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A named account may hold a secp256k1 key through add_public_key: a ledger matter.
    item = sign_erc191(
        ERC191_PRIVATE_KEY,
        signer_id="alice.near",
        verifying_contract="intents.near",
        deadline=datetime(2099, 1, 1, tzinfo=UTC),
        nonce=bytes(32),
        intents=[TokenDiff(diff={"nep141:usdc.near": 5})],
    )
    code, report = verify(tmp_path, capsys, item.model_dump(mode="json"))
    assert (code, report["valid"]) == (0, True)
    assert report["key_owner"] == secp256k1_address(ERC191_PRIVATE_KEY)
    assert report["signer_is_key_owner"] is False


# ---------------------------------------------------------------------------------- bad input


def test_sign_refuses_a_truncated_payload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_env: str
) -> None:
    source = tmp_path / "payload.json"
    source.write_bytes(orjson.dumps(make_payload())[:-7])
    code, out, err = run(["intents", "sign", "--key-env", key_env, str(source)], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "not valid JSON" in err


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"intents": [{"intent": "token_diff", "diff": {"nep141:usdc.near": -1000}}]},
            "intents.0.token_diff.diff.nep141:usdc.near: Value error, delta must be a decimal string",
        ),
        (
            {
                "intents": [
                    {"intent": "transfer", "receiver_id": "b.near", "tokens": {"nep141:ab.near": 7}}
                ]
            },
            "intents.0.transfer.tokens.nep141:ab.near: Value error, amount must be a decimal string",
        ),
        (
            {
                "intents": [
                    {"intent": "ft_withdraw", "token": "ab", "receiver_id": "bc", "amount": 1.5}
                ]
            },
            "intents.0.ft_withdraw.amount: Value error, amount must be a decimal string",
        ),
        (
            {"intents": [{"intent": "token_diff", "diff": {"nep141:usdc.near": True}}]},
            "delta must be a decimal string",
        ),
        ({"nonce": "AAAA"}, "nonce must be 32 bytes"),
        ({"nonce": "not base64!"}, "nonce is not valid base64"),
        ({"deadline": "2099-01-01T00:00:00"}, "time zone"),
        ({"signer_id": "Not An Account"}, "signer_id"),
        ({"extra_field": 1}, "extra_field"),
        ({"intents": [{"intent": "teleport"}]}, "intents.0"),
    ],
)
def test_sign_refuses_a_bad_payload(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key_env: str,
    secret_key: SecretKey,
    changes: dict[str, Any],
    expected: str,
) -> None:
    source = write_json(tmp_path / "payload.json", make_payload(**changes))
    code, out, err = run(["intents", "sign", "--key-env", key_env, str(source)], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert expected in err
    assert secret_key.to_text()[len("ed25519:") :] not in err


@pytest.mark.parametrize(
    "key_text",
    [
        "not a key",
        "ed25519:abc",
        "ed25519:0OIl",  # not base58
        "",
    ],
)
def test_sign_refuses_a_malformed_key_in_the_environment(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    key_text: str,
) -> None:
    monkeypatch.setenv(KEY_VAR, key_text)
    source = write_json(tmp_path / "payload.json", make_payload())
    code, out, err = run(["intents", "sign", "--key-env", KEY_VAR, str(source)], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert KEY_VAR in err


def test_sign_refuses_a_key_without_prefix_and_never_echoes_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    secret_key: SecretKey,
) -> None:
    body = secret_key.to_text()[len("ed25519:") :]
    source = write_json(tmp_path / "payload.json", make_payload())
    text = secret_key.to_text()
    other_last = "3" if text.endswith("2") else "2"  # a random key ends in "2" once in 58
    for value in (body, text[:-1] + other_last, text + "x"):
        monkeypatch.setenv(KEY_VAR, value)
        code, out, err = run(["intents", "sign", "--key-env", KEY_VAR, str(source)], capsys)
        assert (code, out) == (2, "")
        assert_one_line_error(err)
        assert body not in err
        assert value not in err


def test_sign_refuses_a_missing_key_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_VAR, raising=False)
    source = write_json(tmp_path / "payload.json", make_payload())
    code, out, err = run(["intents", "sign", "--key-env", KEY_VAR, str(source)], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert f"environment variable {KEY_VAR} is not set" in err


def test_a_secret_typed_where_a_name_belongs_is_not_echoed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], secret_key: SecretKey
) -> None:
    secret = secret_key.to_text()
    body = secret[len("ed25519:") :]
    source = str(write_json(tmp_path / "payload.json", make_payload()))
    attempts = [
        ["intents", "sign", "--key-env", secret, source],
        ["intents", "sign", "--key-file", secret, source],
        ["intents", "sign", "--key-env", KEY_VAR, secret],  # as the payload file
        ["intents", "sign", "--key-env", KEY_VAR, source, secret],  # a stray argument
        ["keys", "new", secret],
    ]
    for argv in attempts:
        code, out, err = run(argv, capsys)
        assert (code, out) == (2, ""), argv
        assert_one_line_error(err)
        assert body not in err, argv


def test_sign_refuses_a_key_file_others_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], secret_key: SecretKey
) -> None:
    key_file = tmp_path / "signing.key"
    key_file.write_text(secret_key.to_text())
    key_file.chmod(0o644)
    source = write_json(tmp_path / "payload.json", make_payload())
    code, _, err = run(["intents", "sign", "--key-file", str(key_file), str(source)], capsys)
    assert code == 2
    assert_one_line_error(err)
    assert "chmod 600" in err
    assert secret_key.to_text() not in err


def test_sign_needs_exactly_one_key_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_env: str
) -> None:
    source = str(write_json(tmp_path / "payload.json", make_payload()))
    for argv in (
        ["intents", "sign", source],
        ["intents", "sign", "--key-env", key_env, "--key-file", "x.key", source],
        ["intents", "sign", "--key-env", key_env, "--standard", "erc191", source],
    ):
        code, out, err = run(argv, capsys)
        assert (code, out) == (2, ""), argv
        assert_one_line_error(err)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"standard": "nep413", "payload": {', "not valid JSON"),
        (b"", "empty"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"nep413"', "must be a JSON object"),
        (b'{"standard": "webauthn", "payload": "{}", "signature": "x"}', "webauthn"),
        (b'{"payload": "{}", "signature": "x"}', "standard"),
        (b'{"standard": "nep413", "public_key": "ed25519:x", "signature": "ed25519:x"}', "payload"),
        (b'{"standard": "raw_ed25519", "payload": "{}", "public_key": "ed25519:x"}', "signature"),
    ],
)
def test_verify_refuses_unreadable_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
) -> None:
    source = tmp_path / "signed.json"
    source.write_bytes(content)
    code, out, err = run(["intents", "verify", str(source)], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert expected in err


def test_verify_refuses_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["intents", "verify", str(tmp_path / "nope.json")], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "No such file" in err


# ---------------------------------------------------------------------------------- nonce


def test_nonce_salted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["intents", "nonce", "--salt", SALT_HEX], capsys)
    assert (code, err) == (0, "")
    text = out.strip()
    assert len(b64decode(text)) == 32
    parsed = parse_nonce(text)
    assert parsed.layout == "salted"
    assert parsed.salt == bytes.fromhex(SALT_HEX)
    assert parsed.raw[:4] == bytes.fromhex(SALT_HEX)

    code, again, _ = run(["intents", "nonce", "--salt", SALT_HEX.upper()], capsys)
    assert code == 0
    assert again != out  # 28 fresh random bytes each time


def test_nonce_versioned(capsys: pytest.CaptureFixture[str]) -> None:
    deadline = "2099-11-22T10:00:00.250Z"
    code, out, err = run(
        ["intents", "nonce", "--salt", SALT_HEX, "--layout", "versioned", "--deadline", deadline],
        capsys,
    )
    assert (code, err) == (0, "")
    parsed = parse_nonce(out.strip())
    assert parsed.layout == "versioned"
    assert parsed.raw[:4] == VERSIONED_MAGIC
    assert parsed.salt == bytes.fromhex(SALT_HEX)
    assert parsed.deadline_ns == datetime_to_ns(datetime(2099, 11, 22, 10, 0, 0, 250_000, UTC))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--layout", "versioned"], "needs --deadline"),
        (["--deadline", "2099-01-01T00:00:00Z"], "versioned only"),
        (["--layout", "versioned", "--deadline", "2099-01-01T00:00:00"], "time zone"),
        (["--layout", "versioned", "--deadline", "tomorrow"], "not ISO 8601"),
        (["--layout", "other", "--deadline", "2099-01-01T00:00:00Z"], "invalid choice"),
    ],
)
def test_nonce_refuses_bad_options(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, out, err = run(["intents", "nonce", "--salt", SALT_HEX, *argv], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert expected in err


@pytest.mark.parametrize("salt", ["2528", "252812b3ff", "zz2812b3", "ab cd ef"])
def test_nonce_refuses_a_bad_salt(capsys: pytest.CaptureFixture[str], salt: str) -> None:
    code, out, err = run(["intents", "nonce", "--salt", salt], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "salt must be 8 hex characters" in err


def test_nonce_warns_about_a_past_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--layout", "versioned", "--deadline", "2001-01-01T00:00:00Z"]
    code, out, err = run(["intents", "nonce", "--salt", SALT_HEX, *argv], capsys)
    assert code == 0
    assert parse_nonce(out.strip()).layout == "versioned"
    assert err.startswith("solver: warning: ")


# ---------------------------------------------------------------------------------- subprocess


def test_subprocess_sign_and_verify_round_trip(tmp_path: Path, secret_key: SecretKey) -> None:
    env = {KEY_VAR: secret_key.to_text()}
    payload = orjson.dumps(make_payload()).decode()
    for standard in ("nep413", "raw_ed25519"):
        signed = run_solver(
            ["intents", "sign", "--key-env", KEY_VAR, "--standard", standard],
            env=env,
            stdin=payload,
        )
        assert (signed.returncode, signed.stderr) == (0, ""), signed.stderr
        assert signed.stdout.count("\n") == 1

        checked = run_solver(["intents", "verify"], stdin=signed.stdout)
        assert (checked.returncode, checked.stderr) == (0, "")
        assert orjson.loads(checked.stdout)["valid"] is True

        tampered = signed.stdout.replace("250000", "250001")
        checked = run_solver(["intents", "verify", "-"], stdin=tampered, module=True)
        assert checked.returncode == 1
        assert orjson.loads(checked.stdout)["valid"] is False


def test_subprocess_errors_are_one_line(tmp_path: Path, secret_key: SecretKey) -> None:
    secret = secret_key.to_text()
    payload = orjson.dumps(make_payload()).decode()
    cases: list[tuple[list[str], dict[str, str], str]] = [
        (["intents", "sign", "--key-env", KEY_VAR], {KEY_VAR: secret}, payload[:-3]),
        (["intents", "sign", "--key-env", KEY_VAR], {KEY_VAR: secret[:-2]}, payload),
        (["intents", "sign", "--key-env", KEY_VAR], {}, payload),
        (["intents", "verify"], {}, '{"standard": "bogus"}'),
        (["intents", "sign", "--key-env", secret], {}, payload),
        (["intents", "nonce", "--salt", "xyz"], {}, ""),
        (["no-such-command"], {}, ""),
    ]
    for argv, env, stdin in cases:
        done = run_solver(argv, env=env, stdin=stdin)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stdout == ""
        assert_one_line_error(done.stderr)
        assert secret[len("ed25519:") :] not in done.stderr
        assert secret[len("ed25519:") : -2] not in done.stderr


def test_subprocess_nonce_and_version() -> None:
    done = run_solver(["intents", "nonce", "--salt", SALT_HEX], module=True)
    assert (done.returncode, done.stderr) == (0, "")
    assert parse_nonce(done.stdout.strip()).salt == bytes.fromhex(SALT_HEX)

    done = run_solver(["--version"])
    assert done.returncode == 0
    assert done.stdout.strip().startswith("solver ")
