"""The service of the specification, run locally: the verifier ledger (a pure state machine),
the ledger RPC node, the message bus, the swap and history APIs and simulated takers.

The bot never imports this package; the backtest uses :mod:`sandbox.ledger` to settle fills.
"""
