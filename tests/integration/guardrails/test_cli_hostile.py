"""The CLI as a user (or systemd) runs it, in processes of its own, against bad input and a
hostile host: unusable state and audit paths, a busy metrics port, bad log levels and test
hooks, config modes, and a Slack webhook URL that must not leak through any surface. Each
run is a process forked by a warm server (tests/cli_runner.py): its own pid, exit status and
fds 0/1/2, without a second of imports per case.

User errors are one line on stderr starting ``error:``, exit 2 (the shipped unit's
RestartPreventExitStatus, so no restart loop), and no traceback."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from coreburst.sandbox.emulator import MotoProcess, WebhookReceiver, free_port
from guardrails.stores.sqlite import State
from tests import cli_runner
from tests.helpers.guardrails_loopback import config_text
from tests.helpers.guardrails_processes import Daemon, env, idle_fleet
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration

SECRET_URL = "https://hooks.slack.com/services/T0SECRET/B0SECRET/XXXXSECRETTOKEN"
SECRET_BITS = ("T0SECRET", "B0SECRET", "XXXXSECRETTOKEN")
INSTANCE = "i-0123456789abcdef0"
UNIT = Path(__file__).parents[3] / "guardrails" / "deploy" / "coreburst-guardrails.service"


def cli(
    *args: str, e: dict[str, str] | None = None, prefix: tuple[str, ...] = (), timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return cli_runner.run(
        [*prefix, sys.executable, "-m", "coreburst.sandbox.guardrails", *args],
        env=e if e is not None else env(datetime.now().astimezone(), None),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def user_error(r: subprocess.CompletedProcess[str]) -> str:
    """The single ``error:`` line of a user error (exit 2, no traceback, nothing else)."""
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr)
    assert lines[0].startswith("error: ")
    return lines[0]


def test_the_unit_restarts_on_everything_but_exit_2() -> None:
    """Why one line and exit 2 matters: systemd restarts the daemon on any other failure."""
    text = UNIT.read_text()
    assert "Restart=on-failure" in text and "RestartPreventExitStatus=2" in text


# -- item 13: state, audit and metrics problems, per command ---------------------------------
COMMANDS: dict[str, tuple[str, ...]] = {
    "once": ("once",),
    "run": ("run", "--max-cycles", "1"),
    "status": ("status",),
    "explain": ("explain", INSTANCE),
}


def _cfg(tmp: Path, state: Path, audit: Path, extra: str = "") -> Path:
    text = config_text(f"http://127.0.0.1:{free_port()}", tmp, extra)
    text = text.replace(f'"{tmp}/state.sqlite"', f'"{state}"').replace(
        f'"{tmp}/audit.jsonl"', f'"{audit}"'
    )
    cfg = tmp / "g.yaml"
    cfg.write_text(text)
    return cfg


def _corrupt(tmp: Path) -> tuple[Path, Path]:
    state = tmp / "state.sqlite"
    state.write_bytes(b"not a database, whatever the name says\n" * 200)
    return state, tmp / "audit.jsonl"


def _directory(tmp: Path) -> tuple[Path, Path]:
    (tmp / "state.sqlite").mkdir()
    return tmp / "state.sqlite", tmp / "audit.jsonl"


def _parent_is_a_file(tmp: Path) -> tuple[Path, Path]:
    (tmp / "var").write_text("a file where a directory is expected")
    return tmp / "var" / "state.sqlite", tmp / "audit.jsonl"


STATE_CASES: dict[str, tuple[Callable[[Path], tuple[Path, Path]], str]] = {
    "corrupt": (_corrupt, "is not a usable SQLite database"),
    "directory": (_directory, "is a directory; set state.path to a file path"),
    "parent-is-a-file": (_parent_is_a_file, "is a file, not a directory; set state.path"),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", STATE_CASES)
def test_an_unusable_state_path_is_one_line_for_every_command(
    tmp_path: Path, case: str, command: str
) -> None:
    make, needle = STATE_CASES[case]
    state, audit = make(tmp_path)
    before = state.read_bytes() if state.is_file() else None
    cfg = _cfg(tmp_path, state, audit)
    line = user_error(cli(*COMMANDS[command], "--config", str(cfg)))
    assert str(state) in line and needle in line, line
    assert "cannot reach AWS" not in line  # stopped before doing anything
    if before is not None:
        assert state.read_bytes() == before  # not "repaired", not overwritten


def _audit_is_a_directory(tmp: Path) -> tuple[Path, Path]:
    (tmp / "audit.jsonl").mkdir()
    return tmp / "state.sqlite", tmp / "audit.jsonl"


def _audit_parent_is_a_file(tmp: Path) -> tuple[Path, Path]:
    (tmp / "log").write_text("a file where a directory is expected")
    return tmp / "state.sqlite", tmp / "log" / "audit.jsonl"


AUDIT_CASES: dict[str, tuple[Callable[[Path], tuple[Path, Path]], str]] = {
    "directory": (_audit_is_a_directory, "is a directory; set state.audit_log"),
    "parent-is-a-file": (_audit_parent_is_a_file, "is a file, not a directory"),
}
AUDIT_WRITERS = ("once", "run", "explain")  # status reads the state only


@pytest.mark.parametrize("command", AUDIT_WRITERS)
@pytest.mark.parametrize("case", AUDIT_CASES)
def test_an_unusable_audit_log_is_one_line(tmp_path: Path, case: str, command: str) -> None:
    make, needle = AUDIT_CASES[case]
    state, audit = make(tmp_path)
    cfg = _cfg(tmp_path, state, audit)
    line = user_error(cli(*COMMANDS[command], "--config", str(cfg)))
    assert str(audit) in line and needle in line, line


def _unprivileged() -> tuple[str, ...]:
    """A command prefix under which a directory's mode is enforced. Root bypasses modes
    through CAP_DAC_OVERRIDE; ``setpriv`` (util-linux) clearing the capability bounding set
    runs the child as uid 0 without it (the interpreter under /root stays reachable, unlike
    with --reuid=nobody)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        require("running as root without setpriv (util-linux): a read-only dir is writable")
    return (setpriv, "--bounding-set=-all", "--inh-caps=-all")


def _read_only_dir(tmp: Path, name: str) -> Path:
    d = tmp / name
    d.mkdir()
    d.chmod(0o555)
    prefix = _unprivileged()
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", f"open({str(d / 'probe')!r}, 'w')"],
        capture_output=True,
        check=False,
    )
    if probe.returncode == 0:
        pytest.skip("this kernel/container lets the child write a mode-0555 directory")
    return d


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_state_directory_is_one_line(tmp_path: Path, command: str) -> None:
    ro = _read_only_dir(tmp_path, "state")
    state = ro / "state.sqlite"
    if command == "status":  # status needs a state file to look at
        ro.chmod(0o755)
        State(state).close()
        ro.chmod(0o555)
    cfg = _cfg(tmp_path, state, tmp_path / "audit.jsonl")
    try:
        line = user_error(cli(*COMMANDS[command], "--config", str(cfg), prefix=_unprivileged()))
    finally:
        ro.chmod(0o755)
    assert f"state.path {state}: {ro} is not writable by this user" in line, line


@pytest.mark.parametrize("command", AUDIT_WRITERS)
def test_a_read_only_audit_directory_is_one_line(tmp_path: Path, command: str) -> None:
    ro = _read_only_dir(tmp_path, "audit")
    audit = ro / "audit.jsonl"
    cfg = _cfg(tmp_path, tmp_path / "state.sqlite", audit)
    try:
        line = user_error(cli(*COMMANDS[command], "--config", str(cfg), prefix=_unprivileged()))
    finally:
        ro.chmod(0o755)
    assert f"state.audit_log {audit}: {ro} is not writable by this user" in line, line


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    """Only `run` serves metrics."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = _cfg(
            tmp_path,
            tmp_path / "state.sqlite",
            tmp_path / "audit.jsonl",
            f"metrics_endpoint: {{enabled: true, port: {port}}}",
        )
        text = cfg.read_text().replace("metrics_endpoint: {enabled: false}\n", "")
        cfg.write_text(text)
        line = user_error(cli("run", "--max-cycles", "1", "--config", str(cfg)))
    assert f"cannot listen on 127.0.0.1 port {port}" in line, line
    assert "change metrics_endpoint.address/port" in line


# -- item 18: log level, test hooks; items 3, 4, 12 through check-config ---------------------
@pytest.mark.parametrize("command", ["once", "run"])
def test_an_unknown_log_level_is_one_line_listing_the_levels(tmp_path: Path, command: str) -> None:
    cfg = _cfg(tmp_path, tmp_path / "s.db", tmp_path / "a.jsonl")
    line = user_error(cli(command, "--log-level", "verbose", "--config", str(cfg)))
    assert "'verbose' is not a log level; use one of debug, info, warning, error" in line
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("COREBURST_CLOCK_SPEED", "abc"),
        ("COREBURST_CLOCK_START", "tomorrow"),
        ("COREBURST_TEST_PAUSE_AT", "halfway"),
    ],
)
def test_a_bad_test_hook_names_its_variable(tmp_path: Path, var: str, value: str) -> None:
    cfg = _cfg(tmp_path, tmp_path / "s.db", tmp_path / "a.jsonl")
    e = env(datetime.now().astimezone(), None)
    e[var] = value
    line = user_error(cli("once", "--config", str(cfg), e=e))
    assert line.startswith(f"error: {var}={value!r}"), line
    # Without COREBURST_TEST_HOOKS=1 the same variable is not read at all: the run goes on
    # to AWS (unreachable here), past every hook.
    del e["COREBURST_TEST_HOOKS"]
    line = user_error(cli("once", "--config", str(cfg), e=e))
    assert "cannot reach AWS" in line, line


@pytest.mark.parametrize(
    ("text", "extra_env", "mode"),
    [
        ("", {}, "dry-run (dry_run not set; to act, write dry_run: false"),
        ("regions: [us-east-1]\n", {}, "dry-run (dry_run not set"),
        ("dry_run: true\n", {}, "dry-run (dry_run: true)"),
        ("dry_run: false\n", {}, "acting (dry_run: false)"),
        ("", {"COREBURST_DRY_RUN": "false"}, "acting (dry_run: false)"),
    ],
)
def test_check_config_says_which_mode(
    tmp_path: Path, text: str, extra_env: dict[str, str], mode: str
) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(text)
    r = cli("check-config", str(cfg), e=env(datetime.now().astimezone(), None, **extra_env))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(mode) or mode in r.stdout, r.stdout


@pytest.mark.parametrize(
    ("text", "extra_env", "needle"),
    [
        ("interval: 0s\n", {}, "g.yaml: interval: 0s is out of range; allowed 10s to 1d"),
        ("idle: {window: 0s}\n", {}, "idle.window: 0s is out of range; allowed 5m to 7d"),
        ("idle: {max_gap: -300}\n", {}, "idle.max_gap: -5m is out of range"),
        ("reclaim: {grace: 0s}\n", {}, "reclaim.grace: 0s is out of range"),
        ("interval: 99999999999d\n", {}, "interval: duration out of range"),
        ("interval: 1.0e+308\n", {}, "interval: duration out of range"),
        ("", {"COREBURST_INTERVAL": "1e308"}, "environment COREBURST_INTERVAL: interval:"),
        ("regions: [日本-east-1]\n", {}, "regions.0: '日本-east-1' is not an AWS region name"),
        ("", {"COREBURST_IDLE": "window=30m"}, "environment COREBURST_IDLE: not valid JSON"),
        ("", {"COREBURST_REGIONS": "us-east-1,nowhere"}, "regions.1: 'nowhere' is not an AWS"),
    ],
)
def test_check_config_refuses_in_one_line(
    tmp_path: Path, text: str, extra_env: dict[str, str], needle: str
) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(text)
    r = cli("check-config", str(cfg), e=env(datetime.now().astimezone(), None, **extra_env))
    line = user_error(r)
    assert needle in line, line
    assert "OverflowError" not in line


def test_check_config_takes_a_comma_separated_region_list(tmp_path: Path) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text("")
    e = env(datetime.now().astimezone(), None, COREBURST_REGIONS="us-east-1,eu-west-2")
    r = cli("check-config", str(cfg), e=e)
    assert r.returncode == 0 and "regions us-east-1, eu-west-2;" in r.stdout, r.stderr


# -- item 10: the webhook URL on every surface --------------------------------------------------
@pytest.mark.parametrize(
    ("text", "extra_env"),
    [
        (f"slack: {{webhook_url: '{SECRET_URL}'}}\n", {}),
        ("", {"COREBURST_SLACK__WEBHOOK_URL": SECRET_URL}),
        ("", {"COREBURST_SLACK": SECRET_URL}),
        ("", {"COREBURST_SLACK": f'{{"webhook_url": "{SECRET_URL}"}}'}),
    ],
)
def test_check_config_never_prints_the_webhook_url(
    tmp_path: Path, text: str, extra_env: dict[str, str]
) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(text)
    r = cli("check-config", str(cfg), e=env(datetime.now().astimezone(), None, **extra_env))
    line = user_error(r)
    assert "slack" in line.lower()
    for bit in SECRET_BITS:
        assert bit not in r.stdout + r.stderr


def test_the_webhook_url_reaches_no_log_audit_state_metric_or_status(
    moto: MotoProcess, hook: WebhookReceiver, tmp_path: Path, t0: datetime
) -> None:
    """A daemon sending through a webhook whose path is the secret, with Slack once echoing
    the URL back in an error, then a reload that puts the URL in the config (rejected). None
    of: its JSON log lines, the audit log, the state DB's bytes (and its WAL), /metrics,
    `status` may hold any part of it."""
    port = free_port()
    secret_local = hook.url.replace("/services/T0/B0/demo", "/services/T0SECRET/B0SECRET/")
    secret_local += "XXXXSECRETTOKEN"
    hook.script = [(500, {}, f"upstream said: {secret_local}")]
    text = config_text(moto.url, tmp_path, "interval: 10s").replace(
        "metrics_endpoint: {enabled: false}", f"metrics_endpoint: {{enabled: true, port: {port}}}"
    )
    cfg = tmp_path / "g.yaml"
    cfg.write_text(text)
    idle_fleet(moto, t0, idle=1, blind=1)
    e = env(t0, None, COREBURST_CLOCK_SPEED="10", COREBURST_SLACK_WEBHOOK_URL=secret_local)
    d = Daemon(cfg, e, "--log-level", "debug")
    metrics = ""
    try:
        d.wait_for("cycle.done")
        cfg.write_text(
            text.replace(
                "slack: {backoff_base: 1s}",
                f"slack: {{backoff_base: 1s, webhook_url: '{SECRET_URL}'}}",
            )
        )
        st = cfg.stat()
        os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
        d.wait_for("config.rejected")
        deadline = time.monotonic() + 30
        while not hook.posts and time.monotonic() < deadline:
            time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        d.proc.send_signal(signal.SIGTERM)
        assert d.finish(timeout=60) == 0, "\n".join(d.lines)
    finally:
        d.kill()
    assert hook.posts, "the secret webhook URL was never used"
    assert hook.attempts[0][0] == 500  # Slack's error text carried the URL
    rejected = [x for x in d.lines if "config.rejected" in x]
    assert rejected and "<redacted>" in rejected[0], rejected
    refused = cli("status", "--config", str(cfg), e={**e, "COLUMNS": "200"})
    assert "slack.webhook_url" in user_error(refused)
    cfg.write_text(text)  # the last good config again
    status = cli("status", "--config", str(cfg), e={**e, "COLUMNS": "200"})
    assert status.returncode == 0, status.stderr
    assert "outbox" in status.stdout
    surfaces = {
        "log": "\n".join(d.lines),
        "metrics": metrics,
        "status (bad config)": refused.stdout + refused.stderr,
        "status": status.stdout + status.stderr,
        "audit": (tmp_path / "audit.jsonl").read_text(),
    }
    for f in tmp_path.glob("state.sqlite*"):
        surfaces[f.name] = f.read_bytes().decode("latin-1")
    assert "coreburst_guardrails_cycle_seconds" in surfaces["metrics"]
    for name, content in surfaces.items():
        for bit in SECRET_BITS:
            assert bit not in content, f"{bit} in {name}"
