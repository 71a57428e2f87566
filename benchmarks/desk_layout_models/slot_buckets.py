"""Deadline buckets of slot ints, for :mod:`benchmarks.desk_layout_models.slots` (issue 29).

As :class:`solver.core.deadlines.DeadlineBuckets`, whose buckets hold ``(deadline, id)``
tuples, but holding a quote's slot: no tuple an entry, the deadline read from the slot's list
when a bucket is cut (sorted in C by key).
"""

from __future__ import annotations

from bisect import bisect_left

BUCKET_BITS = 14  # as solver.core.deadlines
_NO_FLOOR = 1 << 62


class SlotBuckets:
    """Deadline buckets of slots (as :class:`solver.core.deadlines.DeadlineBuckets`, without
    the tuple an entry): a slot's deadline is ``deadline[slot]``."""

    __slots__ = ("buckets", "deadline", "floor")

    def __init__(self, deadline: list[int]) -> None:
        self.buckets: dict[int, list[int]] = {}
        self.floor = _NO_FLOOR
        self.deadline = deadline

    def file(self, deadline: int, slot: int) -> None:
        index = deadline >> BUCKET_BITS
        bucket = self.buckets.get(index)
        if bucket is None:
            self.buckets[index] = [slot]
            # Not min(), as in solver.core.deadlines: a builtin's call a bucket.
            if index < self.floor:  # noqa: PLR1730
                self.floor = index
        else:
            bucket.append(slot)

    def take_before(self, at: int) -> list[int]:
        """The slots filed in buckets before ``at``'s, and those of ``at``'s bucket whose
        deadline is before ``at`` (sorted by deadline in C, cut by bisect with a key), in no
        particular order. Stale slots (given back and reused) may be among them: the caller
        checks."""
        buckets = self.buckets
        last = at >> BUCKET_BITS
        floor = self.floor
        if floor > last or not buckets:
            return []
        due: list[int] = []
        pop = buckets.pop
        if last - floor <= len(buckets):
            for index in range(floor, last):
                bucket = pop(index, None)
                if bucket is not None:
                    due += bucket
        else:
            for index in sorted([index for index in buckets if index < last]):
                due += pop(index)
        self.floor = last
        bucket = buckets.get(last)
        if bucket is not None:
            key = self.deadline.__getitem__
            bucket.sort(key=key)
            cut = bisect_left(bucket, at, key=key)
            if cut:
                due += bucket[:cut]
                if cut < len(bucket):
                    del bucket[:cut]
                else:
                    del buckets[last]
        return due
