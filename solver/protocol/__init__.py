"""Wire vocabulary of the spec, pure (no I/O): models, ids, amounts, keys, payloads, nonces.

Shared by the bot, the sandbox and the backtest; every module cites the spec section it
implements (``service-spec.md``) and the protocol-notes section where the spec is silent.
"""
