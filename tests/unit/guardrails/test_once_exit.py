"""`coreburst guardrails once` says in its exit status whether the cycle ran cleanly (issue
24): 0 when every rule ran, 1 when one failed (printed; the others still ran). AWS is moto in
process; the failing rule is core-idle with no Slurm client on its path (one line, as a host
without slurm-client would give)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from typer.testing import CliRunner

from guardrails import cli


def _config(tmp_path: Path, core_idle: bool) -> Path:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(
        f'state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\nregions: [us-east-1]\n"
        + (
            "core_idle: {enabled: true, prometheus_url: 'http://127.0.0.1:9', "
            f'slurm_bin_dir: "{tmp_path}/no-slurm"}}\n'
            if core_idle
            else ""
        )
    )
    return cfg


@pytest.mark.parametrize(("core_idle", "code"), [(False, 0), (True, 1)])
def test_once_exits_1_when_a_rule_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, core_idle: bool, code: int
) -> None:
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "COREBURST_SLACK_WEBHOOK_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        r: Any = CliRunner().invoke(
            cli.app, ["once", "--config", str(_config(tmp_path, core_idle))]
        )
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    if core_idle:
        assert "error" in r.output and "squeue" in r.output, r.output
    # Times are printed to the second, not the microsecond; lines are not hard-wrapped.
    assert re.search(r"^cycle \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ: ", r.output, re.M), r.output
    if core_idle:
        (line,) = [ln for ln in r.output.splitlines() if "squeue" in ln]
        assert line.rstrip().endswith("install slurm-client or set slurm_bin_dir"), r.output


def test_status_reads_as_text_not_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`guardrails status` after a cycle: the node states as words and counts, times to the
    second; no Python dict or microseconds (issue 24: `0 nodes {}`, `{'core-blind': 1}`)."""
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "COREBURST_SLACK_WEBHOOK_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    cfg = _config(tmp_path, core_idle=False)
    with mock_aws():
        import boto3

        ec2 = boto3.client("ec2", region_name="us-east-1")
        ec2.run_instances(
            ImageId="ami-12c6146b", MinCount=2, MaxCount=2, InstanceType="p5.48xlarge"
        )
        assert CliRunner().invoke(cli.app, ["once", "--config", str(cfg)]).exit_code in (0, 1)
        r: Any = CliRunner().invoke(cli.app, ["status", "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert re.fullmatch(
        r"last cycle \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ: 2 nodes \([a-z0-9 ,-]+\)", first
    ), first
    assert "{" not in r.output and "'" not in first


def test_once_without_credentials_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first `once` with no AWS credentials anywhere stops with one line and exit 2 before
    creating the state directory, the audit log or the database (issue 24 item 4)."""
    for var in (
        "AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
        "COREBURST_SLACK_WEBHOOK_URL",
    ):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to ask
    state = tmp_path / "var" / "lib" / "coreburst"
    cfg = tmp_path / "g.yaml"
    cfg.write_text(
        f'state: {{path: "{state}/s.db", audit_log: "{state}/a.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\nregions: [us-east-1]\n"
    )
    res = CliRunner().invoke(cli.app, ["once", "--config", str(cfg)])
    assert res.exit_code == 2, res.output
    assert "no AWS credentials found" in res.output and "nothing was written" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "var").exists()
