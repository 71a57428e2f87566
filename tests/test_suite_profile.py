"""The suite's hypothesis profile (``tests/conftest.py``): property tests judge what they
generate, not how fast, so a machine with every core busy cannot fail them."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def test_the_suite_profile_reads_no_wall_clock() -> None:
    profile = settings.get_profile("suite")
    assert settings.default is not None
    assert settings.default.deadline is None and profile.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check


def test_a_test_with_its_own_settings_keeps_the_profile() -> None:
    # @settings(max_examples=…) on a test starts from the loaded profile: no deadline either.
    assert settings(max_examples=5).deadline is None
