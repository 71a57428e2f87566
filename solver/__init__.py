"""Solver / market-maker bot for an intents-based swap network.

Packages: ``protocol`` (wire vocabulary, pure), ``core`` (decisions, pure), ``io`` (adapters),
``app`` (wiring) and ``cli``. See ``DESIGN.md`` in the shared folder for the map.
"""

__version__ = "0.1.0"
