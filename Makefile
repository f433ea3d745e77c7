# Two commands do all set-up on a fresh machine:
#   make demo   -- run the simulator on the embedded baseline scenario
#   make test   -- run the whole test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint bench bench-sim bench-server fuzz-long clean system-deps

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# redis-server is a Debian package the Redis dedup-store tests start themselves.
system-deps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; \
	  else echo "warning: redis-server not found and cannot install it; Redis tests will fail" >&2; fi; }

demo: $(STAMP)
	$(BIN)/rtalab sim run baseline

test: $(STAMP) system-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadfile tests

lint: $(STAMP)
	$(BIN)/ruff check .

bench: bench-sim bench-server

bench-sim: $(STAMP)
	$(BIN)/rtalab sim bench --memory

bench-server: $(STAMP) system-deps
	$(BIN)/rtalab serve bench

# Not in CI: >= 10,000 fuzzed requests per binding (a few minutes), figures in README.
fuzz-long: $(STAMP)
	nice -n 10 $(BIN)/rtalab serve fuzz --requests 10000

clean:
	rm -rf $(VENV) build *.egg-info
