"""``coreburst gitops stacks``: the job matrix the GitHub workflows run, from the stack files
(issue 32 item 6). A stack is a ``Pulumi.<stack>.yaml``; its region is its ``aws:region``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.cli import app
from coreburst.gitops import GitOpsError, Stack, github_matrix, list_stacks

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["gitops", *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_repositorys_stacks() -> None:
    """What the workflows run for this repository: every stack file, by name, each in its own
    file's region, with its policy pack config."""
    assert list_stacks(ROOT) == [
        Stack("burst", "us-east-1", "policies/config/burst.json"),
        Stack("dev", "us-east-1", "policies/config/dev.json"),
        Stack("prod", "us-east-2", "policies/config/prod.json"),
    ]
    code, out, _ = _run("stacks", "--stack-dir", str(ROOT), "--format", "github-matrix")
    assert code == 0
    assert out.count("\n") == 1 and " " not in out  # one line for $GITHUB_OUTPUT
    assert json.loads(out) == {
        "include": [
            {"stack": "burst", "region": "us-east-1", "policyConfig": "policies/config/burst.json"},
            {"stack": "dev", "region": "us-east-1", "policyConfig": "policies/config/dev.json"},
            {"stack": "prod", "region": "us-east-2", "policyConfig": "policies/config/prod.json"},
        ]
    }


def test_adding_a_stack_file_adds_the_stack(tmp_path: Path) -> None:
    """Just the file: it joins the matrix with its region; without a policy config it gets
    none (the pack's defaults)."""
    (tmp_path / "Pulumi.yaml").write_text("name: coreburst\nruntime: python\n")
    (tmp_path / "Pulumi.dev.yaml").write_text("config:\n  aws:region: us-east-1\n")
    (tmp_path / "Pulumi.burst-eu.yaml").write_text(
        "# a second burst site\nconfig:\n  aws:region: eu-west-2\n  coreburst:tags: {}\n"
    )
    (tmp_path / "policies" / "config").mkdir(parents=True)
    (tmp_path / "policies" / "config" / "dev.json").write_text("{}")
    assert github_matrix(list_stacks(tmp_path)) == {
        "include": [
            {"stack": "burst-eu", "region": "eu-west-2", "policyConfig": ""},
            {"stack": "dev", "region": "us-east-1", "policyConfig": "policies/config/dev.json"},
        ]
    }
    code, out, _ = _run("stacks", "--stack-dir", str(tmp_path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["stack", "region", "policy", "pack", "config"]
    assert lines[1].split() == ["burst-eu", "eu-west-2", "none", "(policy", "defaults)"]
    assert lines[2].split() == ["dev", "us-east-1", "policies/config/dev.json"]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "Pulumi.dev.yaml",
            "config:\n  coreburst:tags: {}\n",
            "Pulumi.dev.yaml: no aws:region; add `aws:region: <region>` under config: (the "
            "workflows deploy each stack to the region its file names)",
        ),
        (
            "Pulumi.dev.yaml",
            "config:\n  aws:region: US East\n",
            "Pulumi.dev.yaml: aws:region 'US East' is not an AWS region (us-east-1)",
        ),
        (
            "Pulumi.dev.yaml",
            "config:\n  aws:region: [us-east-1]\n",
            "Pulumi.dev.yaml: aws:region ['us-east-1'] is not an AWS region (us-east-1)",
        ),
        (
            "Pulumi.dev.yaml",
            "config: [\n",
            "Pulumi.dev.yaml: not valid YAML (while parsing a flow node expected the node "
            "content, but found '<stream end>' in \"<unicode string>\", line 2, column 1: ^)",
        ),
        (
            "Pulumi.$(id).yaml",
            "config:\n  aws:region: us-east-1\n",
            "Pulumi.$(id).yaml: '$(id)' is not a Pulumi stack name (letters, digits, '-', '_', "
            "'.'); rename the file",
        ),
    ],
)
def test_a_stack_file_the_workflows_cannot_run_is_one_line(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    """The stacks job fails on it, with the file and the fix, instead of handing the preview
    and deploy jobs a matrix they would fail on (or a name a shell would run)."""
    (tmp_path / name).write_text(text)
    with pytest.raises(GitOpsError) as err:
        list_stacks(tmp_path)
    assert str(err.value) == message
    code, out, errout = _run("stacks", "--stack-dir", str(tmp_path), "--format", "github-matrix")
    assert (code, out, errout) == (2, "", f"error: {message}\n")


def test_no_stack_file(tmp_path: Path) -> None:
    code, out, errout = _run("stacks", "--stack-dir", str(tmp_path))
    assert (code, out) == (2, "")
    assert errout == (
        f"error: no Pulumi.*.yaml in {tmp_path}: run from the directory holding the stack files "
        "or pass --stack-dir\n"
    )


def test_listing_needs_no_pulumi_and_no_botocore() -> None:
    """The stacks job installs the base only (`pip install -e .`): the command imports neither
    Pulumi nor botocore (the infra extra)."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from coreburst.cli import app\n"
        f"r = CliRunner().invoke(app, ['gitops', 'stacks', '--stack-dir', {str(ROOT)!r},"
        " '--format', 'github-matrix'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " {'pulumi', 'pulumi_aws', 'botocore', 'boto3', 'infra'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_deploy_policy_cli_errors_are_one_line(tmp_path: Path) -> None:
    code, _, errout = _run("deploy-policy", "--stack-dir", str(ROOT), "--account", "12-34")
    assert (code, errout) == (2, "error: '12-34' is not a 12-digit AWS account id (or *)\n")
    (tmp_path / "Pulumi.x.yaml").write_text("config:\n  aws:region: us-east-1\n")
    code, _, errout = _run("deploy-policy", "--stack-dir", str(tmp_path))
    assert code == 2 and errout.startswith("error: ") and errout.count("\n") == 1


def test_deploy_policy_check_names_what_is_stale(tmp_path: Path) -> None:
    code, out, _ = _run("deploy-policy", "--stack-dir", str(ROOT), "--out", str(tmp_path))
    assert code == 0 and out.startswith("wrote deploy-fleet.json, ")
    code, out, _ = _run("deploy-policy", "--stack-dir", str(ROOT), "--check", str(tmp_path))
    assert (code, out) == (0, f"{tmp_path}: 6 policies up to date\n")
    (tmp_path / "deploy-network.json").write_text("{}\n")
    (tmp_path / "deploy-old.json").write_text("{}\n")
    code, _, errout = _run("deploy-policy", "--stack-dir", str(ROOT), "--check", str(tmp_path))
    assert code == 1
    assert errout == (
        f"{tmp_path}: out of date: deploy-network.json, deploy-old.json (no longer generated); "
        f"run: coreburst gitops deploy-policy --out {tmp_path}\n"
    )


def test_the_gitops_doc_shows_the_matrix_and_the_policy_files() -> None:
    """docs/gitops.md shows the matrix this repository's stacks produce, and names every
    policy file the deploy role is to get."""
    from infra.deploy_iam import GROUPS

    doc = (ROOT / "docs" / "gitops.md").read_text(encoding="utf-8")
    shown = doc.split("For this\nrepository:\n\n```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(shown) == github_matrix(list_stacks(ROOT))
    for group in GROUPS:
        assert f"| `.github/iam/deploy-{group}.json` |" in doc
    assert "coreburst gitops deploy-policy --out .github/iam" in doc
