"""The quote path's rate limiter (:class:`solver.core.limits.TokenBucket`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from solver.core.limits import TokenBucket


class MinMaxBucket:
    """The bucket as first written (``min``/``max`` over its fields): the reference."""

    def __init__(self, rate_per_s: float, burst: float) -> None:
        self.rate_per_s, self.burst, self.tokens = rate_per_s, burst, burst
        self.last_s: float | None = None

    def take(self, now_s: float) -> bool:
        if self.last_s is not None and now_s > self.last_s:
            self.tokens = min(self.burst, self.tokens + (now_s - self.last_s) * self.rate_per_s)
        self.last_s = now_s if self.last_s is None else max(self.last_s, now_s)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@given(
    st.sampled_from([0.5, 1.0, 3.3, 200.0, 1e5]),
    st.floats(0, 2e9),
    st.lists(st.sampled_from([0.0, -0.1, 1e-7, 0.001, 0.37, 2.5]), max_size=200),
)
def test_the_bucket_takes_as_the_min_max_reference_does(
    rate: float, start: float, steps: list[float]
) -> None:
    """Same answers and the same floats, bit for bit, whatever the order of times (a time
    earlier than the last neither refills nor moves it)."""
    bucket, reference = TokenBucket(rate, max(1.0, rate)), MinMaxBucket(rate, max(1.0, rate))
    now = start
    for step in steps:
        now += step
        assert bucket.take(now) == reference.take(now)
        assert (bucket.tokens, bucket.last_s) == (reference.tokens, reference.last_s)
