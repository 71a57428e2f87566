"""Rebalancing the inventory through the swap API (docs/rebalance.md): the pure planner and the
runner."""
