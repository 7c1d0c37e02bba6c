"""Test hooks live in the sandbox, not in guardrails: ``coreburst.sandbox.hooks`` reads
``COREBURST_TEST_HOOKS``/``COREBURST_CLOCK_*``/``COREBURST_TEST_PAUSE_AT`` and the harness
``python -m coreburst.sandbox.guardrails`` injects them into ``guardrails.cli.main``; guardrails
itself
takes a clock and a pause callable and never reads those variables."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.sandbox import hooks
from coreburst.sandbox.clocks import FakeClock, OffsetClock
from guardrails import cli
from guardrails.actuator import PAUSE_POINTS
from guardrails.adapters.aws import Aws
from guardrails.adapters.slack import Alert
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

ROOT = Path(__file__).parents[3]
HOOK_VARS = ("COREBURST_TEST_HOOKS", "COREBURST_CLOCK_START", "COREBURST_CLOCK_SPEED")


def test_test_hooks_are_ignored_unless_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COREBURST_CLOCK_START", "2020-01-01T00:00:00+00:00")
    monkeypatch.setenv("COREBURST_CLOCK_SPEED", "abc")
    monkeypatch.setenv("COREBURST_TEST_PAUSE_AT", "nonsense")
    assert hooks.clock() is None  # the system clock
    assert hooks.pause() is None  # ignored: no error
    monkeypatch.setenv("COREBURST_TEST_HOOKS", "1")
    with pytest.raises(hooks.TestHookError, match=r"^COREBURST_CLOCK_SPEED='abc' is not"):
        hooks.clock()
    monkeypatch.setenv("COREBURST_CLOCK_SPEED", "10")
    clock = hooks.clock()
    assert isinstance(clock, OffsetClock) and clock.now().year == 2020
    monkeypatch.setenv("COREBURST_CLOCK_START", "yesterday")
    with pytest.raises(hooks.TestHookError, match=r"^COREBURST_CLOCK_START='yesterday'"):
        hooks.clock()
    with pytest.raises(hooks.TestHookError, match=r"^COREBURST_TEST_PAUSE_AT='nonsense'"):
        hooks.pause()


@pytest.mark.parametrize("speed", ["0", "-1", "nan", "inf", "1e9"])
def test_a_clock_speed_out_of_range_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, speed: str
) -> None:
    monkeypatch.setenv("COREBURST_TEST_HOOKS", "1")
    monkeypatch.setenv("COREBURST_CLOCK_START", "2026-01-05T10:00:00+00:00")
    monkeypatch.setenv("COREBURST_CLOCK_SPEED", speed)
    with pytest.raises(hooks.TestHookError, match=r"^COREBURST_CLOCK_SPEED="):
        hooks.clock()


def test_no_production_module_reads_the_test_hook_variables() -> None:
    """Every module of the shipped package, searched for the hook variables' names and for an
    import of the sandbox (which holds the code that reads them)."""
    names = re.compile(
        r"COREBURST_(TEST_HOOKS|CLOCK_START|CLOCK_SPEED|TEST_PAUSE_AT)|^\s*(from|import) sandbox\b",
        re.M,
    )
    files = sorted((ROOT / "guardrails").rglob("*.py"))
    assert len(files) > 20  # the search covers the package (rules/ included)
    readers = sorted(str(p.relative_to(ROOT)) for p in files if names.search(p.read_text()))
    assert readers == []


def test_the_harness_refuses_a_bad_hook_in_one_line_exit_2(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "COREBURST_TEST_HOOKS": "1",
        "COREBURST_CLOCK_START": "2026-01-05T10:00:00+00:00",
        "COREBURST_CLOCK_SPEED": "fast",
    }
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "coreburst.sandbox.guardrails",
            "check-config",
            str(tmp_path / "g.yaml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: COREBURST_CLOCK_SPEED='fast' is not a number between 0 (exclusive) and 1000000"
    ]


def test_the_production_cli_ignores_the_hook_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same bad hook the harness refuses: `guardrails` itself never looks, so `once` goes
    on to AWS (unreachable here) instead."""
    cfg = tmp_path / "g.yaml"
    cfg.write_text(
        f'aws: {{endpoint_url: "http://127.0.0.1:9", max_attempts: 1, connect_timeout_s: 0.5}}\n'
        f'state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\n"
    )
    for var in HOOK_VARS:
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("COREBURST_CLOCK_SPEED", "fast")
    monkeypatch.setenv("COREBURST_TEST_PAUSE_AT", "nonsense")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    r: Any = CliRunner().invoke(cli.app, ["once", "--config", str(cfg)])
    assert r.exit_code == 2
    assert "cannot reach AWS" in r.output and "COREBURST_" not in r.output, r.output


def test_the_injected_pause_is_called_at_each_point(tmp_path: Path) -> None:
    """The daemon calls the pause it was given at after-enqueue (every alert stored),
    after-intent and after-action (every action); without one it calls nothing."""
    cfg = parse_config(
        f'dry_run: false\nstate: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "safety: {kill_switch_file: null}\nmetrics_endpoint: {enabled: false}\n",
        "g.yaml",
    )
    seen: list[str] = []
    state = State(cfg.state.path)
    d = Daemon(cfg, Aws(cfg.aws), state, clock=FakeClock(datetime.now(UTC)), pause=seen.append)
    try:
        d.leader = True
        d.alert(Alert("k1", "k", "t", ["x"]))
        d.actuator.execute("a1", "i-1", "us-east-1", "stop", reason="r", call=lambda: "Stop")
    finally:
        d.close()
        state.close()
    assert seen == ["after-enqueue", "after-intent", "after-action"]
    assert set(seen) == set(PAUSE_POINTS)
