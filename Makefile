# coreburst developer entry points. `make demo` and `make test` work on a fresh clone.
VENV ?= .venv
BIN := $(VENV)/bin
# The interpreter the virtual environment is made from: Debian's own python3 (3.11+) where it
# is there, as it is built with profile-guided optimisation and LTO (the suite's Python code
# runs about 25 % faster on it than on a default pyenv build), else python3 from PATH.
PYTHON ?= $(shell /usr/bin/python3 -c 'import ensurepip, sys; sys.exit(sys.version_info < (3, 11))' \
	>/dev/null 2>&1 && echo /usr/bin/python3 || echo python3)
# Python may cache compiled modules (__pycache__/, git-ignored) even where the environment
# says not to: without the cache every test worker and every CLI the tests start compiles the
# project's modules again, and pytest rewrites every test module again (collecting the suite
# took 13.3 s of CPU per worker without the cache, 6.4 s with it). pip compiles what it installs
# (about 35 s): installing with --no-compile left it to the test workers, which all compiled the
# same modules at once at start (worker start-up 16 s -> 64 s).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup system-deps demo plan lint test test-slurm test-durations unit integration bench bench-burst bench-cost lambda-package arch clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@echo "setup 1/3: creating the virtual environment $(VENV) ($(PYTHON) -m venv)"
	$(PYTHON) -m venv $(VENV)
	@echo "setup 2/3: upgrading pip in $(VENV)"
	$(BIN)/pip install --upgrade pip
	@echo "setup 3/3: installing coreburst and its dev extra into $(VENV) (about 160 packages:"
	@echo "           Pulumi, Ansible, moto, matplotlib...; about 5 minutes on a fresh machine)"
	$(BIN)/pip install --progress-bar on -e '.[dev]'
	touch $@
	@echo "setup done: $(VENV)/bin/coreburst is installed (or: . $(VENV)/bin/activate)"

## Debian packages the tests use for real (root; no-op when present). See .ci/run.
## openssh-client: ansible's ssh connection (the unreachable-host test); Debian 13 images lack it.
## debootstrap: the chroots of the other Slurm releases (.ci/slurm-chroot.sh).
SYSTEM_DEPS := gnupg apt-utils python3-apt make unzip openssh-client debootstrap slurmctld slurmd slurm-client \
	munge prometheus slurmdbd mariadb-server
system-deps:
	@missing=$$(for p in $(SYSTEM_DEPS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
		| grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		[ "$$(id -u)" = 0 ] || { echo "system-deps: run as root to install:$$missing"; exit 2; }; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

## The guardrails daemon against an emulated fleet (no cloud, no credentials; all on 127.0.0.1).
demo: setup
	@echo "demo: starting the AWS emulator (moto server) and a Slack webhook receiver on 127.0.0.1,"
	@echo "      launching emulated p5/trn2 nodes, then guardrail cycles on a fast clock (about 30 s);"
	@echo "      it stops everything it started"
	$(BIN)/coreburst guardrails demo

plan: setup
	$(BIN)/coreburst plan --stack $(or $(STACK),dev)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## The whole test suite: lint, types, unit and integration tests, with each file's durations.
## pytest-xdist workers, each taking a whole test file at a time (--dist loadfile: a file's
## module-scoped Slurm lab or moto server starts once, on one worker). The Slurm-lab and Ansible
## files mostly wait on timers and subprocesses, the unit files mostly compute: several workers
## overlap the waits with the computing on two cores. Tests that assert elapsed wall-clock time
## (marker `timing`, listed in tests/conftest.py) then run alone, in one process, so that their
## clocks measure the code and not the other workers. TEST_WORKERS=0: everything in one process.
## Files start longest first, by tests/durations.json (tests/conftest.py); `make test-durations`
## records it again from a parallel run. Five workers: on 2 cores, the parallel pass took 459 s
## with 4, 411 s with 5 and 395 s with 6 (fresh clone, 2026-12-04); 5 keeps some headroom for
## the labs' waits under load.
TEST_WORKERS ?= 5
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
## mypy (over a minute of one core on a fresh clone, mostly reading pulumi_aws) runs beside the
## parallel pass, on the CPU its waiting workers leave; its report is printed after the pass's,
## and either failing fails `make test` (`make lint` runs it alone, first).
MYPY_LOG := $(VENV)/mypy-during-tests.log
test: system-deps setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
ifeq ($(TEST_WORKERS),0)
	$(BIN)/mypy
	$(BIN)/pytest -q
else
	@echo "$(BIN)/mypy > $(MYPY_LOG) (in the background, beside the tests; its report follows them)"
	@$(BIN)/mypy > $(MYPY_LOG) 2>&1 & mypy=$$!; \
	$(BIN)/pytest -q $(PYTEST_PARALLEL) -m "not timing"; tests=$$?; \
	wait $$mypy; typed=$$?; echo "$(BIN)/mypy:"; cat $(MYPY_LOG); \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]
	$(BIN)/pytest -q -m timing --durations=5
endif

## The tests that start a real Slurm (marker `slurm`: burst, core idle, cost accounting, the
## demo) against Slurm $(SLURM): 22.05 is Debian 12's, run on the host with $(VENV); 24.11
## (Debian 13) and 26.05 (sid) run inside a Debian chroot built with debootstrap and kept under
## /var/cache/coreburst, in a private network namespace (.ci/slurm-chroot.sh; root).
## SLURM defaults to the host's release.
SLURM ?= $(shell slurmctld -V 2>/dev/null | awk '{print $$2}' | cut -d. -f1,2)
HOST_SLURM := $(shell slurmctld -V 2>/dev/null | awk '{print $$2}' | cut -d. -f1,2)
test-slurm:
	@[ -n "$(SLURM)" ] || { echo "test-slurm: SLURM=22.05|24.11|26.05 (no Slurm on the host)"; exit 2; }
	@if [ "$(SLURM)" = "$(HOST_SLURM)" ]; then $(MAKE) --no-print-directory system-deps setup; fi
	TEST_WORKERS=$(TEST_WORKERS) .ci/slurm-chroot.sh $(SLURM)

test-durations: setup
	$(BIN)/pytest -q $(PYTEST_PARALLEL) -m "not timing" --record-durations

unit: setup
	$(BIN)/pytest -q tests/unit

integration: setup
	$(BIN)/pytest -q -m integration tests/integration

## Guardrail cycles at 1,000 / 5,000 / 10,000 instances: API calls, metrics requested, client CPU,
## memory and CloudWatch $/day (not a test; SIZES=1000 for one size).
bench: setup
	$(BIN)/python benchmarks/guardrails_cycle.py --sizes $(if $(SIZES),$(SIZES),1000,5000,10000)

## Submit -> running on a burst node on the local Slurm lab, and the resume program's wall time
## and EC2 calls at 64 / 500 nodes (needs root and Slurm; not a test); then the resume program's
## CPU to its first AWS call, direct and through the burst agent (benchmarks/resume_startup.py);
## then requeue -> running again after a capacity failure, a spot interruption and a failed boot
## check on this host's Slurm (benchmarks/requeue_restart.py; another release:
## .ci/slurm-chroot.sh 26.05 --run python benchmarks/requeue_restart.py); then 24 h of capacity
## answers replayed: holds, backoffs, job waits (benchmarks/capacity_replay.py).
bench-burst: setup
	$(BIN)/python benchmarks/burst_resume.py --sizes $(if $(SIZES),$(SIZES),64,500)
	$(BIN)/python benchmarks/resume_startup.py
	$(BIN)/python benchmarks/requeue_restart.py
	$(BIN)/python benchmarks/capacity_replay.py

## cost report over a 30-day window of 100,000 and 1,000,000 generated job runs (recorded
## 22.05 sacct --json layout, a sacct stand-in on PATH): wall, CPU, peak RSS, totals
## (benchmarks/cost_report.py; records are kept in $TMPDIR/coreburst-bench-cost, ~3 GB).
bench-cost: setup
	$(BIN)/python benchmarks/cost_report.py --sizes $(if $(SIZES),$(SIZES),100000,1000000)

## The guardrail daemon for AWS Lambda (python3.11, x86_64) in build/lambda: this project's
## wheel installed with its guardrails extra (`pip install '.[guardrails]' --target`).
## `pulumi preview`/`up` build it themselves when missing or stale; FORCE=1 rebuilds.
lambda-package: setup
	$(BIN)/python -m infra.lambda_package $(if $(FORCE),--force)

## The import graph between the top-level packages (edges, cycles, arrows against the layer
## contract), then the contract itself ([tool.importlinter] in pyproject.toml).
arch: setup
	$(BIN)/python tools/import_graph.py
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
