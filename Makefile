# ftcourse: two commands do all the setup on a fresh machine.
#   make course   executes every notebook (offline profile) into build/, with HTML pages
#   make test     runs the package's tests and nbval on every notebook
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
# (a worker's torch and its notebook kernels get CORES / TEST_JOBS threads), one notebook or one
# test file per worker at a time, the heaviest notebooks first (ftcourse.course.notebooks order).
CORES      := $(shell nproc 2>/dev/null || echo 1)
TEST_JOBS  ?= $(shell n=$(CORES); [ $$n -gt 4 ] && n=4; echo $$n)
TEST_THREADS = $(shell t=$$(( $(CORES) / $(TEST_JOBS) )); [ $$t -lt 1 ] && t=1; echo $$t)
# Files go to the workers in the order given (--no-loadscope-reorder): xdist's default sorts them by
# their number of tests, which sent lesson 3b (23 minutes, 18 cells) out 55 minutes into a run.
PARALLEL   = -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder
# The slowest test files (a notebook each under the paper-smoke profile; a class of hostile
# submissions each), started first beside the heaviest notebooks; pytest collects each file once.
HEAVY_TESTS := tests/test_paper_profile.py tests/test_grading_verdicts.py tests/test_grading_hostile.py
THREADS    = OMP_NUM_THREADS=$(TEST_THREADS) MKL_NUM_THREADS=$(TEST_THREADS)

test-package: install
	$(THREADS) $(BIN)/python -m pytest $(PARALLEL) $(HEAVY_TESTS) tests

test-notebooks: install
	$(THREADS) $(BIN)/python -m pytest $(PARALLEL) --nbval-lax --sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider \
	  $$($(BIN)/python -m ftcourse.course.notebooks order)

# Both at once, balanced over the workers: what `make test` runs after the system packages.
test-all: install
	$(THREADS) $(BIN)/python -m pytest $(PARALLEL) --nbval-lax --sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider \
	  $(HEAVY_TESTS) $$($(BIN)/python -m ftcourse.course.notebooks order) tests

lab: install
	$(BIN)/jupyter lab notebooks

bench: install
	$(BIN)/python -m bench

check-notebooks: install
	$(BIN)/python -m ftcourse.course.notebooks check
