"""Fitting the ``logistic`` fill model to a stream or a store, with intervals and a plot."""
