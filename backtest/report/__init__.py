"""A backtest's outputs: summary, fills, timing, and the HTML report with its tables and plots."""
