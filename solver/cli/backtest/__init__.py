"""``solver backtest …`` and ``solver record``: streams, replays, calibration and sweeps."""
