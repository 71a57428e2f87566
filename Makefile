# The two commands people need: `make demo` and `make test`. Everything starts by creating
# .venv (first use only) and installing the project with its dev extras into it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_SECONDS ?= 60

.PHONY: demo test lint types unit bench clean sandbox

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/solver demo --config config/sandbox.yaml --seconds $(DEMO_SECONDS)

sandbox: $(STAMP)
	$(BIN)/solver sandbox --config config/sandbox.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP)
	$(BIN)/mypy

# Three workers on CI's two cores, tests dealt out one at a time with stealing (pytest-xdist's
# worksteal): the suite waits on subprocesses, sockets and timers much of the time, and every test
# holds with both cores busy (issue 22). Files dealt whole (loadfile) left one worker idle for the
# last ~50 s behind a long file; a third worker fills the waits (531 s -> 394 s of tests on the
# same machine, docs/testing.md "The time budget"). `make test WORKERS=N` to change it.
# compileall first: the many tests that start the bot or the CLI as a subprocess each import
# ~400 of the project's modules, and where PYTHONDONTWRITEBYTECODE is set (CI's machine) every
# start compiled them again, ~0.5 s of CPU a start (docs/testing.md, "The time budget").
WORKERS ?= 3
unit: $(STAMP)
	@$(BIN)/python -m compileall -q -j 2 solver strategies backtest sandbox benchmarks tests >/dev/null
	$(BIN)/pytest -n $(WORKERS) --dist worksteal

# mypy beside the tests, not before them: it needs one core for ~40 s on CI's machine while the
# tests mostly wait (docs/testing.md, "The time budget"). mypy prints one line unless it fails.
test: lint
	@$(MAKE) --no-print-directory -j2 types unit

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
