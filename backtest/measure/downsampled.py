"""A time series kept to a bounded number of points however long the run (:class:`Downsampled`).

The measurements' PnL and inventory series use it so a replay's memory stays flat in the
stream's length, and the report's curves stay evenly spread over the run.
"""

from __future__ import annotations

__all__ = ["Downsampled"]


class Downsampled:
    """A time series of at most ``2 * capacity`` points over any run length.

    Every ``stride``-th point is kept; when the series is full, every other point is dropped and
    the stride doubles. Deterministic, and the kept points stay evenly spread over the run.
    """

    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self.points: list[tuple[float, tuple[float, ...]]] = []
        self.stride = 1
        self._count = 0
        self.last: tuple[float, tuple[float, ...]] | None = None

    def add(self, t: float, values: tuple[float, ...]) -> None:
        self.last = (t, values)
        if self._count % self.stride == 0:
            self.points.append((t, values))
            if len(self.points) >= 2 * self.capacity:
                self.points = self.points[::2]
                self.stride *= 2
        self._count += 1

    def series(self) -> list[tuple[float, tuple[float, ...]]]:
        """The kept points and the latest one (so a plot reaches the end of the run)."""
        if self.last is not None and (not self.points or self.points[-1] is not self.last):
            return [*self.points, self.last]
        return list(self.points)
