"""The power programs' EC2 model (coreburst/burst/ec2model.py): cut from the installed
botocore's own model to the calls they make, cached on disk, and the same requests and
answers as with the whole model (botocore validates and parses both); and the plain program's
start without typer (coreburst/burst/programs.py). Issue 33 item 5."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.exceptions import ParamValidationError
from moto import mock_aws

from coreburst.burst import ec2model, programs
from tests.helpers.aws import fake_aws_env
from tests.helpers.burst import CLUSTERS, stack_map, write_stack
from tests.helpers.ec2ops import power_operations

REPO = Path(__file__).resolve().parents[3]


def test_the_cut_holds_every_call_the_power_programs_make() -> None:
    assert power_operations() <= ec2model.OPERATIONS
    full = botocore.session.get_session().get_component("data_loader")
    model = full.load_service_model("ec2", "service-2")
    cut = ec2model.cut(model)
    assert set(cut["operations"]) == ec2model.OPERATIONS
    assert len(json.dumps(cut)) < len(json.dumps(model)) / 20


def _client(cache: Path) -> Any:
    s = botocore.session.get_session()
    s.register_component("data_loader", ec2model.CutLoader(cache))
    return s.create_client("ec2", region_name="us-east-1")


def test_a_client_on_the_cut_model_talks_to_ec2_as_the_full_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_aws_env(monkeypatch)
    with mock_aws():
        ec2 = _client(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            f"botocore-{botocore.__version__}-ec2-{t}.json"
            for t in ("endpoint-rule-set-1", "endpoints", "service-2")
        ]
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": ["running"]}]
        )
        assert [p["Reservations"] for p in pages] == [[]]
        ec2.create_tags(Resources=["i-0123456789abcdef0"], Tags=[{"Key": "k", "Value": "v"}])
        with pytest.raises(ParamValidationError):  # botocore still checks the request's shape
            ec2.create_fleet(Type="instant")
        assert not hasattr(ec2, "run_instances")  # the cut is what it says
        # The next run reads the cache; a damaged cache is made again, not trusted.
        (tmp_path / f"botocore-{botocore.__version__}-ec2-service-2.json").write_text("{")
        again = _client(tmp_path)
        assert again.describe_subnets()["Subnets"] is not None


def test_the_rendered_program_starts_without_typer(tmp_path: Path) -> None:
    """``python -m coreburst burst resume --stack S --stack-dir D HOSTLIST`` (the rendered
    layout) imports no command-line framework; the AWS call goes to a closed port."""
    burst = {"logFile": str(tmp_path / "p.log"), "auditLog": str(tmp_path / "a.jsonl")}
    write_stack(tmp_path, "t", stack_map(CLUSTERS[:1], {**burst, "suspendTimeout": 4}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTHON"))}
    env.update(
        PYTHONPATH=str(REPO), AWS_ENDPOINT_URL="http://127.0.0.1:1", AWS_ACCESS_KEY_ID="x",
        AWS_SECRET_ACCESS_KEY="x", AWS_EC2_METADATA_DISABLED="true",
    )  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "coreburst", "burst", "suspend", "--stack",
         "t", "--stack-dir", str(tmp_path), "od-1"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    assert "botocore.client" in imported and "typer" not in imported
    assert "boto3" not in imported
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert proc.returncode == 1 and line.startswith("error: suspend: ")


def test_only_the_rendered_layout_skips_typer() -> None:
    assert programs.main(["resume", "--help"]) is None
    assert programs.main(["resume", "od-1", "--stack", "t", "--stack-dir", "."]) is None
    assert programs.main(["launch", "--stack", "t", "--stack-dir", ".", "od-1"]) is None
    assert programs.main(["resume", "--stack", "t", "--stack-dir", ".", "--help"]) is None
