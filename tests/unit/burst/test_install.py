"""`coreburst burst install` in a temporary controller tree, as root, for real users of this
host (``daemon`` as SlurmUser): what it writes, with which owners and modes, that a second run
changes nothing, that bad input writes nothing, and that SlurmUser can then commit a spend
gate approval into the state it prepared (the guardrails' SQLite store, as the gate does)."""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from coreburst.burst.cli import app
from guardrails.stores.sqlite import State
from tests.helpers.burst import CLUSTERS, stack_map, write_stack
from tests.helpers.prereq import require

runner = CliRunner()
SLURM_USER = "daemon"  # a real user on Debian (uid 1), standing in for SlurmUser
SITE_CONF = (
    "ClusterName=core\nSlurmctldHost=ctl\nSuspendTime=300\n"
    "SlurmctldParameters=reboot_from_controller\nNodeName=dgx[01-04] CPUs=224\n"
    "PartitionName=core Nodes=dgx[01-04] PriorityTier=10 Default=YES\n"
)


@pytest.fixture
def root() -> Iterator[Path]:
    """A controller tree under /tmp that SlurmUser can traverse (pytest's own temporary
    directories are 0700 root, which would hide the stack file from it)."""
    require(None if os.geteuid() == 0 else "install sets owners: run the tests as root")
    base = Path(tempfile.mkdtemp(prefix="coreburst-install-", dir="/tmp"))
    base.chmod(0o755)
    (base / "etc/slurm").mkdir(parents=True)
    (base / "etc/slurm/slurm.conf").write_text(SITE_CONF)
    (base / "stacks").mkdir()
    yield base
    shutil.rmtree(base)


def _stack(root: Path, **burst: Any) -> None:
    settings = {
        "coreNodes": "dgx[01-04]",
        "resumeProgram": str(root / "usr/local/sbin/coreburst-burst-resume"),
        "suspendProgram": str(root / "usr/local/sbin/coreburst-burst-suspend"),
        "resumeFailProgram": str(root / "usr/local/sbin/coreburst-burst-resume-fail"),
        "logFile": str(root / "var/log/coreburst/burst-power.log"),
        "auditLog": str(root / "var/log/coreburst/burst-audit.jsonl"),
        **burst,
    }
    cfg = stack_map(CLUSTERS[:2], settings)
    cfg["aws:region"] = "us-east-2"
    cfg["coreburst:availabilityZone"] = "us-east-2a"
    write_stack(root / "stacks", "t", cfg)


def _args(root: Path, *extra: str) -> list[str]:
    return [
        "install", "--stack", "t", "--stack-dir", str(root / "stacks"),
        "--slurm-conf", str(root / "etc/slurm/slurm.conf"),
        "--env-file", str(root / "etc/coreburst/burst.env"),
        "--state-dir", str(root / "var/lib/coreburst"),
        "--systemd-dir", str(root / "etc/systemd/system"),
        "--slurm-user", SLURM_USER, "--slurm-release", "22.05", *extra,
    ]  # fmt: skip


def _tree(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (
            st.st_mode,
            st.st_uid,
            st.st_gid,
            b"" if p.is_dir() else p.read_bytes(),
        )
    return out


def _mode(p: Path) -> tuple[str, str, str]:
    st = p.stat()
    return (
        f"{stat.S_IMODE(st.st_mode):04o}",
        pwd.getpwuid(st.st_uid).pw_name,
        grp.getgrgid(st.st_gid).gr_name,
    )


def test_install_writes_each_piece_once_and_a_second_run_changes_nothing(root: Path) -> None:
    _stack(root)
    first = runner.invoke(app, _args(root))
    assert first.exit_code == 0, first.output
    sbin = root / "usr/local/sbin"
    for path in (
        root / "etc/slurm/burst.conf",
        root / "etc/slurm/coreburst-reservations.sh",
        root / "etc/slurm/slurm.conf",
        root / "etc/slurm/gres.conf",
        sbin / "coreburst-burst-resume",
        sbin / "coreburst-burst-suspend",
        sbin / "coreburst-burst-resume-fail",
        root / "etc/coreburst/burst.env",
    ):
        assert f"wrote {path} (" in first.output, path
    assert f"created {root}/var/lib/coreburst/ (2770 daemon:daemon)" in first.output
    assert f"created {root}/var/log/coreburst/ (0750 daemon:daemon)" in first.output
    assert "next: scontrol reconfigure" in first.output

    # The programs run this installation's coreburst and the stack directory by absolute path.
    resume = (sbin / "coreburst-burst-resume").read_text()
    exec_line = resume.splitlines()[-1]
    argv = shlex.split(exec_line)[1:]
    assert Path(argv[0]).is_absolute() and os.access(argv[0], os.X_OK), exec_line
    assert argv[1:6] == ["burst", "resume", "--stack", "t", "--stack-dir"]
    assert argv[6] == str(root / "stacks")
    assert f". {root}/etc/coreburst/burst.env" in resume
    assert _mode(sbin / "coreburst-burst-resume") == ("0755", "root", "root")
    # AWS settings: readable by SlurmUser's group, by nobody else.
    assert _mode(root / "etc/coreburst/burst.env") == ("0640", "root", "daemon")
    assert _mode(root / "var/lib/coreburst") == ("2770", "daemon", "daemon")
    assert _mode(root / "var/log/coreburst") == ("0750", "daemon", "daemon")
    conf = (root / "etc/slurm/slurm.conf").read_text()
    assert conf.startswith(SITE_CONF) and conf.endswith("\nInclude burst.conf\n")
    gres = (root / "etc/slurm/gres.conf").read_text()
    assert "NodeName=od-[1-2] Name=gpu Type=h100 File=/dev/nvidia[0-7]" in gres
    # The site's SlurmctldParameters survive in the fragment's line that replaces them.
    burst_conf = (root / "etc/slurm/burst.conf").read_text()
    assert "\nSlurmctldParameters=reboot_from_controller,idle_on_node_suspend," in burst_conf
    assert "slurm.conf:3: SuspendTime=300 is replaced by burst.conf's SuspendTime=600" in (
        first.stderr
    )

    before = _tree(root)
    second = runner.invoke(app, _args(root))
    assert second.exit_code == 0, second.output
    assert "nothing to change: stack t is installed" in second.stdout
    assert "wrote" not in second.stdout and "next:" not in second.stdout
    assert _tree(root) == before


def test_dry_run_says_what_would_change_and_writes_nothing(root: Path) -> None:
    _stack(root)
    before = _tree(root)
    out = runner.invoke(app, _args(root, "--dry-run"))
    assert out.exit_code == 0, out.output
    assert f"would write {root}/etc/slurm/burst.conf (0644 root:root)" in out.stdout
    assert "would change" in out.stdout
    assert _tree(root) == before


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"user": "no-such-user-here"},
            "error: --slurm-user 'no-such-user-here': no such user on this host",
        ),
        ({"prefix_under_file": True}, "is not a directory"),
        ({"stack_private": True}, "error: SlurmUser daemon cannot read "),
        ({"cli": "coreburst burst"}, "start with an absolute path"),
        ({"state_dir": "/var/lib"}, "error: --state-dir /var/lib: a system directory"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    root: Path, change: dict[str, Any], message: str
) -> None:
    _stack(root)
    args = _args(root)
    if "user" in change:
        args[args.index("--slurm-user") + 1] = change["user"]
    if change.get("prefix_under_file"):
        (root / "etc/slurm/not-a-dir").write_text("")
        args += ["--prefix", str(root / "etc/slurm/not-a-dir/sub")]
    if change.get("stack_private"):
        (root / "stacks").chmod(0o700)
    if "cli" in change:
        args += ["--cli", change["cli"]]
    if "state_dir" in change:
        args[args.index("--state-dir") + 1] = change["state_dir"]
    before = _tree(root)
    out = runner.invoke(app, args)
    assert out.exit_code == 2, out.output
    assert out.output.count("\n") == 1 and message in out.output, out.output
    assert _tree(root) == before


def test_configless_nodes_need_burst_conf_next_to_slurm_conf(root: Path) -> None:
    _stack(root, node={"confServer": "ctl:6817"})
    out = runner.invoke(app, [*_args(root), "--prefix", str(root / "etc/slurm/coreburst")])
    assert out.exit_code == 2
    assert "configless" in out.output and f"use --prefix {root}/etc/slurm" in out.output


def test_env_file_keeps_the_sites_lines_never_prints_them_and_is_made_private(
    root: Path,
) -> None:
    _stack(root)
    env = root / "etc/coreburst/burst.env"
    env.parent.mkdir(parents=True)
    site = "export AWS_PROFILE=burst\nexport HTTPS_PROXY=http://proxy:3128/?token=s3cr3t\n"
    env.write_text(site)
    env.chmod(0o644)  # readable by every user: install must close it
    out = runner.invoke(app, _args(root))
    assert out.exit_code == 0, out.output
    text = env.read_text()
    assert text.endswith(site) and "export COREBURST_STACK=t\n" in text
    assert "export AWS_REGION=us-east-2\n" in text
    assert _mode(env) == ("0640", "root", "daemon")
    assert "s3cr3t" not in out.output and "AWS_PROFILE" not in out.output
    # A region change rewrites the block only.
    cfg = yaml.safe_load((root / "stacks/Pulumi.t.yaml").read_text())
    cfg["config"]["aws:region"] = "us-east-1"
    cfg["config"]["coreburst:availabilityZone"] = "us-east-1a"
    (root / "stacks/Pulumi.t.yaml").write_text(yaml.safe_dump(cfg))
    again = runner.invoke(app, _args(root))
    assert again.exit_code == 0, again.output
    assert f"wrote {env} (0640 root:daemon)" in again.stdout
    text = env.read_text()
    assert text.count("export AWS_REGION=") == 1 and "AWS_REGION=us-east-1\n" in text
    assert text.endswith(site)


def test_agent_unit_runs_the_agent_as_slurm_user(root: Path) -> None:
    _stack(root, agentSocket="/run/coreburst-test/burst-agent.sock")
    out = runner.invoke(app, _args(root))
    assert out.exit_code == 0, out.output
    unit = (root / "etc/systemd/system/coreburst-burst-agent.service").read_text()
    assert "User=daemon\n" in unit and "KillMode=process\n" in unit
    assert "RuntimeDirectory=coreburst-test\n" in unit
    (exec_start,) = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    assert Path(argv[0]).is_absolute()
    assert argv[1:] == [
        "burst", "agent", "--stack", "t", "--stack-dir", str(root / "stacks"),
        "--socket", "/run/coreburst-test/burst-agent.sock",
    ]  # fmt: skip
    assert "systemctl restart coreburst-burst-agent" in out.stdout
    # The programs ask the agent first, through the same interpreter by absolute path.
    resume = (root / "usr/local/sbin/coreburst-burst-resume").read_text()
    assert f"exec {sys.executable} -P -m coreburst.burst.fast --socket" in resume


def _gate(root: Path, state_dir: Path) -> Path:
    g = root / "etc/coreburst/guardrails.yaml"
    g.parent.mkdir(parents=True, exist_ok=True)
    g.write_text(
        yaml.safe_dump(
            {
                "state": {"path": str(state_dir / "guardrails.sqlite")},
                "spend": {"scopes": [{"name": "account", "daily_limit_usd": 10000}]},
                "burst_reconcile": {"spend_scope": "account"},
            }
        )
    )
    _stack(root, spendGate={"guardrailsConfig": str(g)})
    return state_dir / "guardrails.sqlite"


COMMIT_AS_SLURM_USER = """
import sys
from datetime import UTC, datetime
from pathlib import Path
from coreburst.burst.commitments import SpendLedger
from guardrails.stores.sqlite import State
r = SpendLedger(State(Path(sys.argv[1])), "account").reserve(
    {"od-1": (55.04, 2.0)}, {"today": 10000.0}, datetime.now(UTC))
print("approved" if r.ok else "refused")
"""


def _commit_as(user: str, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", user, "--", sys.executable, "-c", COMMIT_AS_SLURM_USER, str(db)],
        capture_output=True, text=True, timeout=60, check=False, cwd="/",
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )  # fmt: skip


def test_the_spend_gate_can_commit_as_slurm_user_after_install(root: Path) -> None:
    """The daemon (here: root) made the state file; the resume program runs as SlurmUser and
    commits its approval there (commitments.SpendLedger, one compare-and-swap write)."""
    require(None if shutil.which("runuser") else "runuser (util-linux) is not installed")
    state_dir = root / "var/lib/coreburst"
    state_dir.mkdir(parents=True)
    db = _gate(root, state_dir)
    store = State(db)
    store.add_spend(datetime.now(UTC), "account", burn=0.0, today=0.0, mtd=0.0, proj=0.0)
    store.db.close()
    refused = _commit_as(SLURM_USER, db)
    assert refused.returncode != 0 and "readonly database" in refused.stderr, refused
    out = runner.invoke(app, _args(root))
    assert out.exit_code == 0, out.output
    assert f"set {db} to 0660 root:daemon (was 0644 root:root)" in out.stdout
    done = _commit_as(SLURM_USER, db)
    assert done.returncode == 0 and done.stdout.strip() == "approved", done


def test_state_dir_must_hold_the_gates_state(root: Path) -> None:
    _gate(root, root / "srv/guardrails")
    out = runner.invoke(app, _args(root))
    assert out.exit_code == 2
    assert f"pass --state-dir {root}/srv/guardrails" in out.output


def test_a_missing_gate_state_is_a_note_not_an_error(root: Path) -> None:
    db = _gate(root, root / "var/lib/coreburst")
    out = runner.invoke(app, _args(root))
    assert out.exit_code == 0, out.output
    assert f"note: the spend gate's state {db} does not exist yet" in out.stdout


def test_an_installed_program_runs_as_slurm_user_with_no_path(root: Path) -> None:
    """As slurmctld starts it: SlurmUser, an empty environment. The program finds coreburst by
    its absolute path, sources the env file through its group and logs where SlurmUser may
    write. A hostlist that is not one is rejected before any AWS call (exit 2, audited)."""
    require(None if shutil.which("runuser") else "runuser (util-linux) is not installed")
    _stack(root)
    assert runner.invoke(app, _args(root)).exit_code == 0
    env = root / "etc/coreburst/burst.env"
    env.write_text(env.read_text() + "echo sourced-by-$(id -un) >&2\n")
    r = subprocess.run(
        ["runuser", "-u", SLURM_USER, "--", "/usr/bin/env", "-i",
         str(root / "usr/local/sbin/coreburst-burst-resume"), "od-[1-"],
        capture_output=True, text=True, timeout=120, check=False, cwd="/",
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"sourced-by-{SLURM_USER}" in r.stderr and "hostlist" in r.stderr, r.stderr
    audit = root / "var/log/coreburst/burst-audit.jsonl"
    assert "resume.rejected" in audit.read_text()
    assert audit.stat().st_uid == pwd.getpwnam(SLURM_USER).pw_uid


def test_a_prefix_of_its_own_is_included_by_path_for_file_configured_nodes(root: Path) -> None:
    _stack(root)  # no coreburst:burst.node: no configless burst nodes to serve
    prefix = root / "etc/slurm/coreburst"
    out = runner.invoke(app, [*_args(root), "--prefix", str(prefix)])
    assert out.exit_code == 0, out.output
    assert f"created {prefix}/ (0755 root:root)" in out.stdout
    conf = (root / "etc/slurm/slurm.conf").read_text()
    assert conf.endswith(f"\nInclude {prefix}/burst.conf\n")
    assert (prefix / "burst.conf").is_file() and (prefix / "coreburst-reservations.sh").is_file()
