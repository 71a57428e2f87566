"""JSON log lines carry the ids that let one quote be followed end to end (issue 5)."""

from __future__ import annotations

import logging

import orjson

from solver.io.logsetup import JsonFormatter


def test_json_lines_carry_extra_fields_and_exceptions() -> None:
    record = logging.LogRecord("solver.engine", logging.INFO, __file__, 1, "fill %s", ("q1",), None)
    record.quote_id, record.quote_hash, record.intent_hash = "q1", "H", "I"
    line = JsonFormatter().format(record)
    body = orjson.loads(line)
    assert "\n" not in line
    assert (
        body["msg"] == "fill q1" and body["level"] == "INFO" and body["logger"] == "solver.engine"
    )
    assert (body["quote_id"], body["quote_hash"], body["intent_hash"]) == ("q1", "H", "I")
    assert body["ts"].endswith("+00:00")
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "bad", (), sys.exc_info())
    assert "ValueError: boom" in orjson.loads(JsonFormatter().format(failed))["exc"]
