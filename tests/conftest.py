"""Suite-wide collection rules.

**Wall-clock tests run alone.** A few tests assert that a deadline bounds elapsed time (a
hanging Slack holds a cycle no longer than its budget, a trickling Prometheus answer is cut
off, SIGTERM ends the daemon at once, ``--help`` imports little). On two cores shared by
parallel workers their clocks measure the machine's load, not the code, so ``make test``
runs them in a second, serial pass: they carry the ``timing`` marker, given here by node id
(parametrized cases included). An entry that matches no collected test fails the run, so a
renamed test cannot silently leave the list.
"""

from __future__ import annotations

import pytest

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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "timing: asserts elapsed wall-clock time; `make test` runs these serially"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
