"""Sweeps: many configurations of one stream, in parallel, ranked, with their outputs."""
