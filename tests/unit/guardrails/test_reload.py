"""`guardrails run` re-reads its config file between cycles and keeps the last good one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from guardrails.cli import app
from guardrails.daemon import CycleReport, Daemon


def test_bad_edit_keeps_last_good_config_and_good_edit_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "g.yaml"
    base = (
        f'state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\ninterval: 10s\n"
    )
    # 10 s (the shortest interval allowed) run 100x faster through the test-clock hook.
    monkeypatch.setenv("COREBURST_TEST_HOOKS", "1")
    monkeypatch.setenv("COREBURST_CLOCK_START", "2026-01-05T10:00:00+00:00")
    monkeypatch.setenv("COREBURST_CLOCK_SPEED", "100")
    cfg.write_text(base + "dry_run: true\nidle: {threshold_percent: 5}\n")
    edits = [
        base + "dry_run: false\nidle: {threshold_percent: 500}\n",  # invalid: > 100
        base + "dry_run: false\nidle: {threshold_percent: 7}\n",
    ]
    seen: list[tuple[bool, float]] = []

    def cycle(self: Daemon) -> CycleReport:
        seen.append((self.cfg.dry_run, self.cfg.idle.threshold_percent))
        if edits:
            cfg.write_text(edits.pop(0))
            st = cfg.stat()
            os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns + len(seen) * 10**9))
        return CycleReport(self.clock.now())

    monkeypatch.setattr(Daemon, "run_cycle", cycle)
    result: Any = CliRunner().invoke(
        app, ["run", "--config", str(cfg), "--max-cycles", "3", "--log-level", "warning"]
    )
    assert result.exit_code == 0, result.output
    # cycle 1: original; cycle 2: the invalid edit is rejected, original kept; cycle 3: applied
    assert seen == [(True, 5.0), (True, 5.0), (False, 7.0)]
    assert "config.rejected" in result.output and "threshold_percent" in result.output
