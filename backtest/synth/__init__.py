"""Synthetic quote streams: flow, parameters and the generator."""
