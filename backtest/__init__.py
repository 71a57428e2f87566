"""Backtesting: recorded quote streams (record, read, synthesise), the replay engine that drives
``solver.core`` with a simulated clock, fill and competition models, reports and sweeps."""
