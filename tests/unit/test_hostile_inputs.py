"""Every file coreburst reads, fed bytes that are not UTF-8, through the real CLI command.

The rule (issue 12): a user error ends in ONE line naming the file, what is wrong and how to
fix it, exit status 2, nothing written, never a traceback. Before :mod:`coreburst.common.textio`,
each of
these raised UnicodeDecodeError. ``test_no_reader_bypasses_textio`` keeps new readers honest.

UTF-8 itself: RFC 3629 (0xE9 alone, Latin-1's "é", is not a valid UTF-8 sequence); Python's
own codec decides, not a table of ours.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.cli import app
from coreburst.common.catalog import CatalogError, load_catalog
from coreburst.common.textio import TextFileError, read_text
from coreburst.tco.model import TcoError, load_defaults
from infra.lambda_package import LambdaPackageError, lambda_requirements

ROOT = Path(__file__).resolve().parents[2]
PREVIEW = ROOT / "tests" / "fixtures" / "preview" / "dev.json"
FLEET = ROOT / "ansible" / "fleet.example.yml"
LATIN1 = b"# caf\xe9\n"  # "café" saved as Latin-1 / Windows-1252


@dataclass
class Case:
    """One reader: the file it reads (``content``), the CLI args to reach it (``{file}`` and
    ``{tmp}`` are filled in), and files the command must not leave behind."""

    name: str
    filename: str
    content: bytes
    args: list[str]
    must_not_exist: tuple[str, ...] = ()


CASES = [
    Case(
        "stack file",
        "Pulumi.hostile.yaml",
        LATIN1 + b"config: {}\n",
        ["plan", "-s", "hostile", "--stack-dir", "{tmp}"],
    ),
    Case(
        "preview JSON",
        "preview.json",
        b'{"steps": [], "note": "caf\xe9"}\n',
        ["plan", "-s", "dev", "--preview-json", "{file}", "--format", "json"],
    ),
    Case(
        "policy config",
        "policy.json",
        b'{"monthly-cost-ceiling": {"note": "caf\xe9"}}\n',
        ["plan", "-s", "dev", "--preview-json", str(PREVIEW), "--policy-config", "{file}"],
    ),
    Case(
        "demand CSV",
        "demand.csv",
        b"timestamp,gpus\n2026-01-01T00:00Z,8\n2026-01-01T01:00Z,8 caf\xe9\n",
        ["tco", "--demand", "{file}", "--utilization-basis", "allocated", "--plot", "{tmp}/t.png"],
        ("t.png",),
    ),
    Case(
        "TCO scenario",
        "scenario.yaml",
        LATIN1 + b"gpus: 8\nutilization_pct: 50\nutilization_basis: measured\n",
        ["tco", "--scenario", "{file}", "--plot", "{tmp}/t.png"],
        ("t.png",),
    ),
    Case(
        "fleet file",
        "fleet.yml",
        FLEET.read_bytes() + LATIN1,
        ["onprem", "render-inventory", "{file}", "-o", "{tmp}/out/hosts.yml"],
        ("out/hosts.yml",),
    ),
    Case(
        "inventory",
        "hosts.yml",
        LATIN1 + b"all:\n  hosts: {dgx-01: null}\n",
        ["onprem", "validate", "--inventory", "{file}", "--report", "{tmp}/r.json", "-q"],
        ("r.json",),
    ),
    Case(
        "guardrails config",
        "guardrails.yaml",
        LATIN1 + b"regions: [us-east-1]\n",
        ["guardrails", "check-config", "{file}"],
    ),
    Case(
        "Slack webhook file",
        "webhook.txt",
        b"https://hooks.slack.com/services/T0/B0/caf\xe9\n",
        ["guardrails", "once", "-c", "{tmp}/guardrails.yaml"],
        ("state.db",),
    ),
]


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_non_utf8_input_is_one_line_exit_2(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / case.filename
    bad.write_bytes(case.content)
    for var in ("COREBURST_SLACK_WEBHOOK_URL", "COREBURST_STATE_PATH"):
        monkeypatch.delenv(var, raising=False)
    if case.name == "Slack webhook file":
        (tmp_path / "guardrails.yaml").write_text(
            f"slack: {{webhook_url_file: {bad}}}\n"
            f"state: {{path: {tmp_path / 'state.db'}, audit_log: {tmp_path / 'audit.log'}}}\n"
        )
    args = [a.replace("{file}", str(bad)).replace("{tmp}", str(tmp_path)) for a in case.args]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    line = _one_error_line(result.stderr)
    assert str(bad) in line
    assert "not UTF-8 at byte" in line and "as UTF-8" in line
    # The offending byte is named by position only: the file may be a secret (webhook URL).
    assert "caf" not in line and "hooks.slack.com" not in line
    for rel in case.must_not_exist:
        assert not (tmp_path / rel).exists(), f"{rel} written despite the bad input"


def test_the_byte_offset_and_line_are_the_first_bad_byte(tmp_path: Path) -> None:
    bad = tmp_path / "x.yaml"
    bad.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(TextFileError) as exc:
        read_text(bad, "stack file")
    assert str(exc.value) == f"{bad}: not UTF-8 at byte 11 (line 2); save the stack file as UTF-8"


def test_utf16_and_bom(tmp_path: Path) -> None:
    """PowerShell 5's `>` writes UTF-16 LE with a BOM (`pulumi preview --json > p.json` on
    Windows); a UTF-8 BOM (Notepad) is dropped, as json.loads would otherwise refuse it."""
    wide = tmp_path / "p.json"
    wide.write_bytes("\ufeff{}".encode("utf-16-le"))
    with pytest.raises(TextFileError, match="preview JSON is UTF-16, not UTF-8; save it as UTF-8"):
        read_text(wide, "preview JSON")
    bom = tmp_path / "b.json"
    bom.write_bytes(b'\xef\xbb\xbf{"steps": []}')
    assert json.loads(read_text(bom, "preview JSON")) == {"steps": []}


@pytest.mark.parametrize(
    ("what", "load", "error"),
    [
        ("catalog", load_catalog.__wrapped__, CatalogError),
        ("on-prem defaults", load_defaults.__wrapped__, TcoError),
        ("pyproject", lambda_requirements, LambdaPackageError),
    ],
)
def test_data_file_readers_use_the_helper_too(
    tmp_path: Path, what: str, load: Callable[[Path], object], error: type[Exception]
) -> None:
    """Readers of files that ship with the project (no CLI flag names them) fail the same way."""
    bad = tmp_path / "data"
    bad.write_bytes(LATIN1)
    with pytest.raises(error) as exc:
        load(bad)
    assert str(exc.value) == f"{bad}: not UTF-8 at byte 5 (line 1); save the {what} as UTF-8"


# -- meta-test: no file reader bypasses coreburst.common.textio
# ---------------------------------------------
# Reads that need no decoding check: kernel-provided ASCII.
ALLOWED = {
    ("guardrails/daemon.py", "/proc/sys/kernel/random/boot_id"),
    # The node-side publisher runs alone on the node (stdlib only): it reads stdin as bytes and
    # skips a line that is not UTF-8 (tests/unit/guardrails/test_neuron_publisher.py).
    ("coreburst/common/neuron_report.py", "stdin"),
    # Our own package file, embedded in the user data: not user input.
    ("infra/userdata.py", '"neuron_report.py"'),
}
WRITE_MODES = set("wax")


def _mode(call: ast.Call, position: int) -> str | None:
    for kw in call.keywords:
        if kw.arg == "mode" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    if len(call.args) > position and isinstance(call.args[position], ast.Constant):
        return str(call.args[position].value)
    return None if any(kw.arg == "mode" for kw in call.keywords) else "r"


def file_reads(source: str) -> list[tuple[int, str]]:
    """(line, call) for each file read in ``source`` that does not go through textio."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        bad = False
        if isinstance(f, ast.Attribute) and name == "read_text" and owner != "textio":
            bad = True  # Path.read_text(): decodes with no error the user can act on
        elif name == "open" and owner not in ("webbrowser",):
            # builtin/io/codecs open(file, mode); Path.open(mode)
            pos = 1 if isinstance(f, ast.Name) or owner in ("io", "codecs", "os") else 0
            mode = _mode(node, pos)
            bad = mode is None or not (set(mode) & WRITE_MODES) or "+" in mode
        elif name == "load" and owner in ("json", "tomllib", "yaml", "pickle"):
            # loaders that take an open file; yaml.load of textio's text (a custom Loader) reads
            # no file
            first = node.args[0] if node.args else None
            bad = not (
                isinstance(first, ast.Call)
                and isinstance(first.func, ast.Name)
                and first.func.id == "read_text"
            )
        elif (
            name == "decode"
            and isinstance(f, ast.Attribute)
            and isinstance(f.value, ast.Call)
            and isinstance(f.value.func, ast.Attribute)
            and f.value.func.attr == "read_bytes"
        ):
            bad = True
        if bad:
            found.append((node.lineno, ast.get_source_segment(source, node) or name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "stdin":
            found.append((node.lineno, "stdin"))
    return found


def test_the_scanner_finds_readers() -> None:
    """The meta-test below can fail: each of these is a reader that skips the helper."""
    for snippet in (
        "Path(p).read_text()",
        "open(p)",
        "open(p, 'r', encoding='latin-1')",
        "p.open()",
        "p.open('r+')",
        "json.load(fh)",
        "p.read_bytes().decode()",
        "sys.stdin.read()",
    ):
        assert file_reads(snippet), snippet
    for snippet in ("read_text(p, 'x', E)", "p.open('a')", "open(p, 'w')", "json.loads(s)"):
        assert not file_reads(snippet), snippet


NOT_SCANNED = ("coreburst/burst/", "coreburst/sandbox/")


def test_no_reader_bypasses_textio() -> None:
    offenders = []
    for pkg in ("coreburst", "infra", "guardrails", "policies"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            # The burst programs and the sandbox were never under this rule (before the move
            # to one import root they were top-level packages outside this list).
            if rel == "coreburst/common/textio.py" or rel.startswith(NOT_SCANNED):
                continue
            for line, call in file_reads(path.read_text(encoding="utf-8")):
                if not any(rel == f and marker in call for f, marker in ALLOWED):
                    offenders.append(f"{rel}:{line}: {call}")
    assert not offenders, (
        "read files with coreburst.common.textio.read_text (one-line error on bad bytes):\n"
        + "\n".join(offenders)
    )
