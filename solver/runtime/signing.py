"""The bot's signers from its config (issue 28): in process with the account's key, or the
signer process on its socket (``signer.mode: remote``), for quotes and for other intents."""

from __future__ import annotations

from solver.config import BotConfig
from solver.protocol.keys import SecretKey
from solver.protocol.quote_signing import QuoteSigner
from solver.runtime.ports import MessageSigner
from solver.signer.client import AlertHook, RemoteIntentSigner, RemoteQuoteSigner


def quote_signer(
    config: BotConfig, key: SecretKey | None, on_alert: AlertHook
) -> QuoteSigner | RemoteQuoteSigner:
    link = config.signer
    if link.mode == "remote":
        assert link.socket is not None
        return RemoteQuoteSigner(
            link.socket,
            config.account.id,
            config.verifier_contract,
            timeout_s=link.timeout_ms / 1000,
            batch_max=link.batch_max,
            max_in_flight=link.max_in_flight,
            reconnect_s=link.reconnect_ms / 1000,
            on_alert=on_alert,
        )
    if key is None:
        raise ValueError("signer.mode in_process needs the account's key")
    return QuoteSigner(key, config.account.id, config.verifier_contract)


def message_signer(config: BotConfig, key: SecretKey | None) -> SecretKey | MessageSigner:
    """What signs the rebalancer's intents: the same key, or the same signer process."""
    if config.signer.mode == "remote":
        assert config.signer.socket is not None
        return RemoteIntentSigner(config.signer.socket, config.account.id, config.verifier_contract)
    if key is None:
        raise ValueError("signer.mode in_process needs the account's key")
    return key
