# The course's commands. Each creates .venv with the pinned dependencies on first use.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUBMISSIONS ?= submissions
OUT ?= grading-output
JOBS ?= 2
GRADE_FLAGS ?=

.PHONY: setup test build check-build lab release release-out grade lint clean

setup: $(STAMP)

# bubblewrap (the grading sandbox), Chromium (for the browser test) and openssl (the certificate of
# a `--dask local` run) come from Debian's packages when run as root; elsewhere install them
# yourself (docs/instructors.md, "Install"). Without bubblewrap the grader refuses to grade and
# the sandbox tests are skipped, saying why.
SYSTEM_PACKAGES := bwrap:bubblewrap chromium:chromium openssl:openssl
$(STAMP): pyproject.toml requirements.lock
	@missing=""; for pair in $(SYSTEM_PACKAGES); do \
		command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair##*:}"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -r requirements.lock
	@# pip compiles one file at a time; on every core the set-up takes 9 s less on two (benchmarks/README.md,
	@# "The test suite"). Files written for a newer Python than this one do not compile: pip skips them too.
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

# Two files at a time; then the files that grade batches (marked batches), two at a time; then the
# ones that read the whole machine (marked whole_machine), one at a time (benchmarks/README.md,
# "The test suite").
test: lint
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -q -n 2 --dist loadfile -m "not batches and not whole_machine"
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -q -n 2 --dist loadfile -m batches
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -q -m whole_machine

build: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/course build

check-build: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/course build --check

# Rebuilt once per clone, then whenever a source notebook or a check changes.
notebooks/.built: $(STAMP) $(wildcard solutions/*/* autograder/*.py autograder/checks/*.py grader/*.py grader/*/*.py)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/course build
	touch $@

lab: notebooks/.built
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/course lab

# What students get (docs/instructors.md, "Release to students"), made from solutions/ into OUT,
# new or empty; OUT must be given (its default is grading's output folder).
release: release-out $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/course release "$(OUT)"

release-out:  # first, before anything is installed
	@test "$(origin OUT)" != file || { echo "usage: make release OUT=<new folder>"; exit 2; }

grade: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/course grade "$(SUBMISSIONS)" --out "$(OUT)" --jobs $(JOBS) $(GRADE_FLAGS)

lint: $(STAMP)
	$(BIN)/ruff check autograder grader $(wildcard solutions/*/cases.py solutions/*/alternatives.py) tests benchmarks
	$(BIN)/ruff format --check autograder grader $(wildcard solutions/*/cases.py solutions/*/alternatives.py) tests benchmarks

clean:  # never grades: an output folder is the instructor's to delete
	rm -rf $(VENV)
