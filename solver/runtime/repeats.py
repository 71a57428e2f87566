"""A failure said once, then counted (issue 24: a store made read-only logged "the query tables
are behind the journal" at every 20 ms tick, 1,394 lines in 2.5 minutes, and buried the one
line that mattered).

:class:`Repeats` logs the first failure of a streak with its message, then only counts; while
the streak lasts it says how many every :data:`REMIND_EVERY_S`, and when the thing works again
it says so once with the count. Time is an argument (``now``, monotonic seconds).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

REMIND_EVERY_S = 300.0
"""While failing, one line with the count this often."""


@dataclass(slots=True)
class Repeats:
    log: logging.Logger
    what: str
    """What fails, for the lines: ``"the projection of the query tables"``."""
    level: int = logging.WARNING
    failures: int = 0
    _remind_at: float = 0.0

    def failed(self, error: object, now: float) -> bool:
        """Count a failure; True for the first of a streak (the caller may act on it once)."""
        self.failures += 1
        if self.failures == 1:
            self.log.log(self.level, "%s failed: %s (repeats are counted)", self.what, error)
            self._remind_at = now + REMIND_EVERY_S
            return True
        if now >= self._remind_at:
            self._remind_at = now + REMIND_EVERY_S
            self.log.log(
                self.level, "%s still failing: %d failures so far; last: %s",
                self.what, self.failures, error,
            )  # fmt: skip
        return False

    def worked(self) -> bool:
        """It worked: the end of a streak is said once, with its count; True when this ended
        a streak (the caller may act on the recovery once)."""
        if not self.failures:
            return False
        self.log.warning("%s works again (after %d failures)", self.what, self.failures)
        self.failures = 0
        return True
