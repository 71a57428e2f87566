"""strategies.docs: docs/strategies.md is generated from the config models and up to date."""

from __future__ import annotations

from pathlib import Path

import pytest

from strategies.docs import DEFAULT_OUTPUT, main, render
from strategies.registry import BUILTINS


def test_checked_in_page_is_up_to_date() -> None:
    current = DEFAULT_OUTPUT.read_text(encoding="utf-8")
    assert current == render(), "docs/strategies.md is stale: run python -m strategies.docs"


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_builtin_parameter_has_a_meaning_and_a_unit(name: str) -> None:
    for field_name, field in BUILTINS[name].Config.model_fields.items():
        assert field.description, f"{name}.{field_name} has no description"
        extra = field.json_schema_extra
        assert isinstance(extra, dict) and extra.get("unit"), f"{name}.{field_name}: no unit"


def test_page_lists_every_parameter_with_default_and_range() -> None:
    text = render()
    for name, cls in BUILTINS.items():
        assert f"## `{name}`" in text
        for field_name in cls.Config.model_fields:
            assert f"| `{field_name}` |" in text
    assert "| `gamma` | `float` | dimensionless | `50.0` | > 0 |" in text
    assert "| `spread_bps` | `float` | bps | `20.0` | ≥ 0, < 10000 |" in text
    assert "| `targets` | `dict[str, float]` | fraction | `{}` | each ≥ 0, each ≤ 1 |" in text


def test_check_mode_fails_on_a_stale_file_and_passes_after_writing(tmp_path: Path) -> None:
    page = tmp_path / "strategies.md"
    page.write_text("old\n", encoding="utf-8")
    assert main(["--check", "--output", str(page)]) == 1
    assert main(["--output", str(page)]) == 0
    assert main(["--check", "--output", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == render()


def test_a_plugin_strategy_renders_by_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--output", "-", "strategies.spread:SpreadStrategy"]) == 0
    out = capsys.readouterr().out
    assert "## `strategies.spread:SpreadStrategy` — SpreadStrategy" in out
    assert "## `amm`" not in out
