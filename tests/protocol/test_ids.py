"""Account ids and asset ids (protocol-notes 4; spec 2.12).

The hypothesis strategies here (``account_ids``, ``asset_ids``) are reused by the other
protocol test modules.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from solver.protocol.ids import (
    AccountId,
    AssetId,
    asset_contract,
    is_eth_implicit_account,
    is_implicit_account,
    validate_account_id,
    validate_asset_id,
)

_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6)


@st.composite
def account_ids(draw: st.DrawFn) -> str:
    """Valid account ids: labels of words joined by ``-``/``_``, labels joined by ``.``."""
    labels: list[str] = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        words = draw(st.lists(_WORD, min_size=1, max_size=3))
        seps = draw(
            st.lists(st.sampled_from("-_"), min_size=len(words) - 1, max_size=len(words) - 1)
        )
        labels.append(words[0] + "".join(s + w for s, w in zip(seps, words[1:], strict=True)))
    account = ".".join(labels)  # at most 3 * (3 * 6 + 2) + 2 = 62 characters
    return account if len(account) >= 2 else account + "0"


@st.composite
def asset_ids(draw: st.DrawFn) -> str:
    contract = draw(account_ids())
    standard = draw(st.sampled_from(["nep141", "nep171", "nep245"]))
    if standard == "nep141":
        return f"nep141:{contract}"
    token = draw(st.text(alphabet="abcXYZ0123456789-_.", min_size=1, max_size=10))
    return f"{standard}:{contract}:{token}"


class _Holder(BaseModel):
    account: AccountId
    asset: AssetId


# ------------------------------------------------------------------------- account ids


@pytest.mark.parametrize(
    "account",
    [
        "ab",
        "a.near",
        "intents.near",
        "alice-bob_carol.near",
        "a1.b2.c3",
        "x" * 64,
        "0x" + "ab" * 20,
        "e2e9cb7ac57cb46d4da1ce1d1cc2c33bdfe17407c517916b522724a8ea2c6c50",
    ],
)
def test_valid_account_ids(account: str) -> None:
    assert validate_account_id(account) == account


@pytest.mark.parametrize(
    "account",
    [
        "",
        "a",  # too short
        "x" * 65,  # too long
        "Alice.near",  # uppercase
        "alice.NEAR",
        "-alice",  # leading separators
        "_alice",
        ".alice",
        "alice-",  # trailing separators
        "alice_",
        "alice.",
        "a..b",  # double separators
        "a--b",
        "a__b",
        "a-_b",
        "a._b",
        "a-.b",
        "a b",
        "a@b",
        "a/b",
        "ä.near",
    ],
)
def test_invalid_account_ids(account: str) -> None:
    with pytest.raises(ValueError, match="invalid account id"):
        validate_account_id(account)


@settings(max_examples=200)
@given(account_ids())
def test_generated_account_ids_are_valid(account: str) -> None:
    assert 2 <= len(account) <= 64
    assert validate_account_id(account) == account


@settings(max_examples=100)
@given(account_ids(), st.data())
def test_uppercase_anywhere_rejected(account: str, data: st.DataObject) -> None:
    account = "q" + account[1:]  # the first character is always a letter or digit
    letters = [i for i, c in enumerate(account) if c.isalpha()]
    pos = data.draw(st.sampled_from(letters))
    bad = account[:pos] + account[pos].upper() + account[pos + 1 :]
    with pytest.raises(ValueError):
        validate_account_id(bad)


@settings(max_examples=100)
@given(account_ids(), st.sampled_from("-_."), st.sampled_from(["lead", "trail", "double"]))
def test_separator_misuse_rejected(account: str, sep: str, where: str) -> None:
    if where == "lead":
        bad = sep + account
    elif where == "trail":
        bad = account + sep
    else:
        bad = account[0] + sep + sep + account[1:]
    with pytest.raises(ValueError):
        validate_account_id(bad)


def test_implicit_account_predicates() -> None:
    hex64 = "0123456789abcdef" * 4
    assert is_implicit_account(hex64)
    assert not is_implicit_account(hex64[:-1])
    assert not is_implicit_account(hex64.upper())
    assert not is_implicit_account("g" + hex64[1:])
    eth = "0x" + "0123456789abcdef0123456789abcdef01234567"
    assert is_eth_implicit_account(eth)
    assert not is_eth_implicit_account(eth[:-1])
    assert not is_eth_implicit_account("0X" + eth[2:])
    assert not is_eth_implicit_account(eth.upper())


# ------------------------------------------------------------------------- asset ids


@pytest.mark.parametrize(
    ("asset", "contract"),
    [
        ("nep141:wrap.near", "wrap.near"),
        ("nep171:nft.near:token-1", "nft.near"),
        ("nep245:mt.near:42", "mt.near"),
        ("nep245:mt.near:a:b", "mt.near"),
    ],
)
def test_valid_asset_ids(asset: str, contract: str) -> None:
    assert validate_asset_id(asset) == asset
    assert asset_contract(asset) == contract


@pytest.mark.parametrize(
    ("asset", "why"),
    [
        ("wrap.near", "must start with"),  # missing standard
        ("nep999:wrap.near", "must start with"),  # unknown standard
        ("NEP141:wrap.near", "must start with"),
        (":wrap.near", "must start with"),
        ("nep171:nft.near", "needs <contract>:<token_id>"),  # nep171 without token id
        ("nep171:nft.near:", "needs <contract>:<token_id>"),
        ("nep245:mt.near", "needs <contract>:<token_id>"),
        ("nep141:", "invalid account id"),
        ("nep141:Wrap.near", "invalid account id"),
        ("nep171:Bad..contract:1", "invalid account id"),
        ("nep141:" + "a" * 300, "at most 256"),
    ],
)
def test_invalid_asset_ids(asset: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        validate_asset_id(asset)


@settings(max_examples=200)
@given(asset_ids())
def test_generated_asset_ids_are_valid(asset: str) -> None:
    assert validate_asset_id(asset) == asset
    assert asset_contract(asset) == asset.split(":")[1]


@settings(max_examples=100)
@given(account_ids(), st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", max_size=8))
def test_unknown_standard_rejected(contract: str, standard: str) -> None:
    if standard in ("nep141", "nep171", "nep245"):
        standard += "x"
    with pytest.raises(ValueError, match="must start with"):
        validate_asset_id(f"{standard}:{contract}")


# ------------------------------------------------------------------------- in models


def test_annotated_types_name_the_field() -> None:
    ok = _Holder(account="alice.near", asset="nep141:wrap.near")
    assert (ok.account, ok.asset) == ("alice.near", "nep141:wrap.near")
    with pytest.raises(ValidationError) as bad_account:
        _Holder(account="Alice.near", asset="nep141:wrap.near")
    assert bad_account.value.errors()[0]["loc"] == ("account",)
    with pytest.raises(ValidationError) as bad_asset:
        _Holder(account="alice.near", asset="nep171:nft.near")
    assert bad_asset.value.errors()[0]["loc"] == ("asset",)
