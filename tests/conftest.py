"""Suite-wide collection rules.

**Wall-clock tests run alone.** A few tests assert that a deadline bounds elapsed time (a
hanging Slack holds a cycle no longer than its budget, a trickling Prometheus answer is cut
off, SIGTERM ends the daemon at once, ``--help`` imports little). On two cores shared by
parallel workers their clocks measure the machine's load, not the code, so ``make test``
runs them in a second, serial pass: they carry the ``timing`` marker, given here by node id
(parametrized cases included). An entry that matches no collected test fails the run, so a
renamed test cannot silently leave the list.

**The slowest files start first.** Under ``--dist loadfile`` each worker takes one whole file
at a time, in collection order. The files that take longest (a Slurm lab, an Ansible sandbox:
mostly waiting on timers and subprocesses) are few-test files; left where collection puts them,
or behind the many-test files, they start last and one worker waits alone on them at the end
(about 5 of 9 minutes of the suite's parallel pass did). So files are put in the order of their
recorded wall time, longest first (``tests/durations.json``; a file it does not list keeps its
place after those it lists), and ``make test`` passes ``--no-loadscope-reorder`` so that xdist
keeps that order. The order changes when tests run, never what they assert.

**Tests that start a real Slurm carry the ``slurm`` marker**, given here, not in the files: a
test is marked when its module, or the module of any fixture it uses (conftest.py included),
holds a name from the Slurm lab (``coreburst.sandbox.slurmlab``, ``slurmdb``, ``burst_demo``).
``make test-slurm SLURM=<release>`` runs ``-m slurm`` against that Slurm release
(.ci/slurm-chroot.sh).
``pytest --record-durations`` rewrites the file from the run (``make test-durations``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")

TIMING = {
    "tests/unit/guardrails/test_cli_import_time.py::test_guardrails_help_is_light",
    "tests/unit/guardrails/test_faults.py::"
    "test_a_hanging_slack_holds_a_cycle_with_six_alerts_no_longer_than_its_budget",
    "tests/unit/guardrails/test_faults.py::"
    "test_a_slow_slack_is_sent_to_within_the_budget_and_the_rest_stays_due",
    "tests/unit/guardrails/test_faults.py::test_half_a_second_timeout_is_half_a_second",
    "tests/unit/tco/test_tco_cli.py::test_a_billion_gpus_in_one_row_is_refused_fast",
    "tests/unit/tco/test_tco_cli.py::test_demand_at_the_bound_is_sized_quickly",
    "tests/unit/core/test_prometheus_bounds.py::test_a_trickling_answer_is_cut_off_at_the_deadline",
    "tests/unit/burst/test_agent.py::test_silent_agent_falls_back_after_the_timeout",
    # An emulator hides a fresh instance for 0.6 s and its address for 1.6 s: a loaded machine
    # reaches the first read after both have passed.
    "tests/unit/burst/test_ec2io.py::test_without_retries_a_fresh_nodes_address_is_missing",
    "tests/integration/guardrails/test_faults_process.py::"
    "test_sigterm_between_cycles_exits_at_once_and_hands_the_lease_back",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test file's wall time in this run to {DURATIONS.name} (merged)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slurm: starts a real Slurm (the lab); `make test-slurm` runs these"
    )
    config.addinivalue_line(
        "markers", "timing: asserts elapsed wall-clock time; `make test` runs these serially"
    )
    if config.getoption("record_durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_DurationRecorder(), "coreburst-durations")


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _recorded() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}  # no hints: collection order, as pytest gives it
    return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}


class _DurationRecorder:
    """Sums each file's setup, call and teardown times as reported to the controlling process
    (under xdist the workers' reports arrive here) and merges them into ``DURATIONS``."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        merged = {**_recorded(), **{f: round(s, 1) for f, s in self.seconds.items()}}
        ordered = dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0])))
        DURATIONS.write_text(json.dumps(ordered, indent=1) + "\n")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m timing`` alone (``make test``'s serial pass) reads only the files TIMING names: the
    other test files hold no test it would select, and importing them took most of its time."""
    if config.getoption("markexpr") != "timing" or not collection_path.name.startswith("test_"):
        return None
    if collection_path.suffix != ".py":
        return None
    try:
        rel = collection_path.resolve().relative_to(Path(config.rootpath).resolve())
    except ValueError:
        return None
    return rel.as_posix() not in {t.split("::", 1)[0] for t in TIMING} or None


SLURM_LAB_MODULES = (
    "coreburst.sandbox.slurmlab",
    "coreburst.sandbox.slurmdb",
    "coreburst.sandbox.burst_demo",
)


def _from_lab(value: object) -> bool:
    origin = getattr(value, "__module__", None)
    if not isinstance(origin, str):
        origin = getattr(value, "__name__", None)  # a module object
    return isinstance(origin, str) and origin in SLURM_LAB_MODULES


def _module_uses_lab(module: object, cache: dict[str, bool]) -> bool:
    """A test module holding a name from the Slurm lab (a class, a function or the module)."""
    name = getattr(module, "__name__", "")
    if name not in cache:
        cache[name] = any(_from_lab(v) for v in vars(module).values()) if module else False
    return cache[name]


def _fixture_uses_lab(func: object) -> bool:
    """A fixture whose own code names something from the Slurm lab (a conftest.py also holds
    fixtures that start no Slurm, so its imports alone do not tell)."""
    code = getattr(func, "__code__", None)
    scope = getattr(func, "__globals__", {})
    return code is not None and any(_from_lab(scope.get(n)) for n in code.co_names)


def _mark_slurm(items: list[pytest.Item]) -> None:
    cache: dict[str, bool] = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = [d for ds in info.name2fixturedefs.values() for d in ds] if info else []
        if _module_uses_lab(getattr(item, "module", None), cache) or any(
            _fixture_uses_lab(d.func) for d in defs
        ):
            item.add_marker(pytest.mark.slurm)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_slurm(items)
    recorded = _recorded()
    # stable: a file's tests keep their order; files not recorded keep theirs, after the rest
    items.sort(key=lambda item: -recorded.get(_file_of(item.nodeid), 0.0))
    seen: set[str] = set()
    for item in items:
        base = item.nodeid.split("[", 1)[0]
        if base in TIMING:
            item.add_marker(pytest.mark.timing)
            seen.add(base)
    # Only a run that collected the whole file can tell that an entry is stale.
    files = {item.nodeid.split("::", 1)[0] for item in items}
    stale = sorted(t for t in TIMING - seen if t.split("::", 1)[0] in files)
    if stale and not config.getoption("keyword") and not config.getoption("markexpr"):
        raise pytest.UsageError(f"tests/conftest.py TIMING names tests that do not exist: {stale}")
