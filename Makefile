# ftcourse: two commands do all the setup on a fresh machine.
#   make course   executes every notebook (offline profile) into build/, with HTML pages
#   make test     runs nbval on every notebook (smoke profile), then the package's tests
#   make lab      opens JupyterLab on the course
# Each creates the virtual environment (.venv) when it is missing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SHARED ?= $(abspath ../shared)

# The offline mirror of the benchmarks, read in place, when it is beside the checkout.
# Unset (no ../shared), the loaders fetch the same data from the Hugging Face hub.
export FTCOURSE_DATA   ?= $(if $(wildcard $(SHARED)/datasets),$(SHARED)/datasets,)
export FTCOURSE_CORPUS ?= $(if $(wildcard $(SHARED)/corpus),$(SHARED)/corpus,)
export FTCOURSE_PROFILE ?= offline
export TOKENIZERS_PARALLELISM := false

NOTEBOOKS := notebooks solutions

# Debian packages the tests need, installed by `make system-packages` when missing
# (chromium: tests/test_site.py checks every page of the course site in a real browser;
#  bubblewrap: `ftcourse grade` runs each submission in a bwrap sandbox, tests/test_grading*.py).
SYSTEM_PACKAGES := chromium bubblewrap

.PHONY: install system-packages course test test-all test-package test-notebooks lab bench clean-notebooks check-notebooks

$(BIN)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[all]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

install: $(BIN)/.installed

course: install
	$(BIN)/python -m ftcourse.course.notebooks build --out build

test: system-packages test-all

system-packages:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  ( $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing ) \
	    || echo "warning: could not install $$missing; the tests that need them say so (and fail under CI=true)"; \
	fi

# The suite runs in parallel (pytest-xdist): TEST_JOBS workers, each on its share of the cores
# (a worker's torch and its notebook kernels get CORES / TEST_JOBS threads). A worker takes one scope
# at a time (--dist loadscope: a test file, a test class, a notebook), heaviest first by the seconds
# each took when last measured (tests/suite_order.py reads data/suite_timings.json; files go to the
# workers in the order given, --no-loadscope-reorder). `make test RECORD_TIMINGS=1` re-measures them.
CORES      := $(shell nproc 2>/dev/null || echo 1)
TEST_JOBS  ?= $(shell n=$(CORES); [ $$n -gt 4 ] && n=4; echo $$n)
TEST_THREADS = $(shell t=$$(( $(CORES) / $(TEST_JOBS) )); [ $$t -lt 1 ] && t=1; echo $$t)
PARALLEL   = -n $(TEST_JOBS) --dist loadscope --no-loadscope-reorder -p no:cacheprovider \
             $(if $(RECORD_TIMINGS),--record-timings data/suite_timings.json,)
THREADS    = OMP_NUM_THREADS=$(TEST_THREADS) MKL_NUM_THREADS=$(TEST_THREADS)
ORDER      = $(BIN)/python tests/suite_order.py
# CI executes every notebook once under nbval, at the smoke profile: the offline profile's code path
# and models on a few dozen examples, in seconds. That proves no cell raises and the checked cells'
# facts; that the committed figures come from the current code is proven by each notebook's stamp
# (tests/test_freshness.py; `python -m ftcourse.course.notebooks execute --stale` re-executes the stale).
NBVAL      = --nbval-lax --sanitize-with tests/nbval_sanitize.cfg

test-package: install
	$(THREADS) $(BIN)/python -m pytest $(PARALLEL) $$($(ORDER) tests)

test-notebooks: install
	$(THREADS) FTCOURSE_PROFILE=smoke $(BIN)/python -m pytest $(PARALLEL) $(NBVAL) $$($(ORDER) notebooks)

# Both, the notebooks first (minutes), each reported; fails if either failed: what `make test` runs.
test-all: install
	@status=0; $(MAKE) --no-print-directory test-notebooks || status=1; \
	$(MAKE) --no-print-directory test-package || status=1; exit $$status

lab: install
	$(BIN)/jupyter lab notebooks

bench: install
	$(BIN)/python -m bench

check-notebooks: install
	$(BIN)/python -m ftcourse.course.notebooks check
