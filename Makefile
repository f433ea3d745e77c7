# Two commands do all set-up on a fresh machine:
#   make demo   -- load-test the embedded deployment where turns queue, calibrate, predict 85 %
#                  utilisation and a 10-s outage, measure both: one paragraph, one report (~3 min)
#   make test   -- run the whole test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast lint seed-check bench bench-sim bench-server bench-sweep clean system-deps bench-check bench-load bench-answers fuzz-long lab report-screenshots bench-report bench-calibrate

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the tests start themselves: redis-server (the Redis dedup-store tests) and
# chromium (the reports checked in a real browser, driven by Playwright without a browser download).
SYSTEM_DEPS := redis-server:redis-server chromium:chromium
system-deps:
	@missing=""; for dep in $(SYSTEM_DEPS); do \
	  command -v $${dep%%:*} >/dev/null 2>&1 || missing="$$missing $${dep##*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; \
	  else echo "warning: not found and cannot install:$$missing; their tests will fail" >&2; fi; fi

demo: $(STAMP) system-deps
	$(BIN)/python -m rtalab.loadtests.loadrun.demo

# four xdist workers on two cores: most of the suite's wall time is load runs waiting on their
# own clocks (CPU / wall 0.2-0.6 per file, tests/oneoff/cpu_table.py), which four overlap; a
# schedule model over the measured per-file CPU and wall (docs/benchmarks.md) gives 18.5 min
# with -n 2, 11 with -n 4, 10 with -n 6 (the 2-core CPU floor)
test: $(STAMP) system-deps
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 4 --dist loadfile --no-loadscope-reorder --durations=40 tests

# the inner loop (< 2 min on 2 cores): no real servers, load runs, notebooks or browsers, nor
# the longest model validations (tests/conftest.py SLOW_PATHS, SLOW_TESTS); CI still runs the
# whole suite (make test)
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist load -m "not slow" tests

# ruff, and mypy strict on sim/ and loadtests/ ([tool.mypy] in pyproject.toml, docs/decisions.md D17)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# One-off, not in `make test`: the statistical tests on 20 seeds, with each test's pass count.
seed-check: $(STAMP)
	nice -n 10 $(BIN)/python tests/oneoff/seeds.py --rounds 20

# every benchmark, one table: results/<time>-bench-all-s0/bench.md + .csv, and docs/benchmarks.md
bench: $(STAMP) system-deps
	nice -n 5 $(BIN)/rtalab bench all --docs docs/benchmarks.md

bench-sim: $(STAMP)
	$(BIN)/rtalab bench sim --memory

bench-sweep: $(STAMP)
	nice -n 10 $(BIN)/rtalab bench sweep
# capacity search economy: points evaluated vs a full sweep of the knob (target <= 40 %)
bench-answers: $(STAMP)
	$(BIN)/rtalab sim capacity baseline --load workload.calls_per_s=1,2,4,8 \
	  --knob reasoner.workers --range 1:64 \
	  --slo 'turn_completion_p99_s<=4' --slo 'success_rate>=0.99'

bench-server: $(STAMP) system-deps
	$(BIN)/rtalab serve bench

bench-check: $(STAMP)
	$(BIN)/rtalab check --bench

# calibration of 1M ledger rows (target <= 10 s)
bench-calibrate: $(STAMP)
	nice -n 5 $(BIN)/rtalab bench calibrate --rows 1000000

bench-load: $(STAMP)
	$(BIN)/rtalab load bench --seconds 5 --rounds 3 --users 50

# Not in CI: >= 10,000 fuzzed requests per binding (a few minutes), figures in README.
fuzz-long: $(STAMP)
	nice -n 10 $(BIN)/rtalab serve fuzz --requests 10000

# JupyterLab on the notebooks; its default kernel is this venv's Python (the project's kernel)
lab: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[lab]'
	$(BIN)/jupyter lab --notebook-dir=notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# README figures: a screenshot of each report kind (docs/screenshots/), from small runs
report-screenshots: $(STAMP) system-deps
	nice -n 5 $(BIN)/python -m tests.oneoff.report_screenshots docs/screenshots

# time of `rtalab report` on a 50-point sweep (target <= 5 s)
bench-report: $(STAMP)
	$(BIN)/rtalab bench report

clean:
	rm -rf $(VENV) build *.egg-info
