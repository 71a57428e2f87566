"""Decisions, pure: no asyncio, no sockets, no clock reads. Time comes in as an argument.

``market`` (the read-only view strategies see), ``inventory`` (confirmed balances and
reservations), ``quoting`` (request → Quote | Skip(reason)), ``limits`` (rate and exposure).
"""
