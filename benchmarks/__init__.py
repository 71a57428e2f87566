"""Benchmarks of the bot's quote path and of the sandbox under load.

Run them with ``make bench`` (or ``.venv/bin/python -m benchmarks.run``); see
``benchmarks/README.md`` for what each one measures and how to read the results.
"""
