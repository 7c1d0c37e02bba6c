"""``coreburst burst install``: the controller side of bursting in one step, run on the
slurmctld host as root.

    $ sudo /opt/coreburst/bin/coreburst burst install --stack prod --stack-dir /etc/coreburst

What it writes (each only when it differs, so a second run changes nothing and says so):

* ``burst.conf`` in ``--prefix`` (default: slurm.conf's directory, the one place configless
  slurmd receive an ``Include`` from), rendered with the site's slurm.conf so the comma lists it
  replaces keep the site's entries (coreburst/burst/merge.py); one ``Include`` line in
  slurm.conf; the burst nodes' lines in a marked block of gres.conf;
  ``coreburst-reservations.sh`` beside them (run it when a Capacity Block is bought);
* the three power programs at the paths burst.conf names, running coreburst by its absolute
  path (this installation's, never one found on slurmctld's bare PATH) on the stack
  directory's absolute path;
* the environment file the programs source: a marked block (stack, region) that it keeps up
  to date; the site's own lines (AWS profile, proxy) outside it are kept. root:SlurmGroup
  0640: AWS settings are never readable by every user, and its text is never printed;
* with ``coreburst:burst.agentSocket``, the agent's systemd unit (runs as SlurmUser);
* the directories the programs write as SlurmUser: their logs and claims, and the state
  directory where the spend gate commits its approvals into the guardrails daemon's SQLite
  state (2770, the daemon and the programs both write there).

Every check runs before the first write: a bad stack, an unknown user, a path that cannot be
written, a stack file or coreburst that SlurmUser cannot read is one line, exit 2, nothing
written. The pure parts (what each file should hold) are functions of their inputs; the file
system is touched in :func:`apply` only.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from coreburst.burst.config import BurstStack
from coreburst.burst.merge import ConfLine, conflicts, include_target, is_fragment_include
from coreburst.burst.merge import parse_conf as parse_conf_text
from coreburst.burst.slurmconf import (
    render_gres,
    render_program,
    render_slurm_include,
    reservation_commands,
)

BEGIN_ENV = "# BEGIN coreburst burst install (this block is rewritten by every install)"
END_ENV = "# END coreburst burst install"
# The marked block in gres.conf; the slurm_burst_controller role's marker is recognised too.
BEGIN_GRES = "# BEGIN coreburst burst nodes (coreburst burst install)"
END_GRES = "# END coreburst burst nodes (coreburst burst install)"
_GRES_BLOCK = re.compile(
    r"^# BEGIN coreburst burst nodes[^\n]*\n.*?^# END coreburst burst nodes[^\n]*\n?",
    re.MULTILINE | re.DOTALL,
)
AGENT_UNIT = "coreburst-burst-agent.service"
RESERVATIONS = "coreburst-reservations.sh"
# Modes: the env file may name AWS credentials files or a profile (SlurmUser reads it through
# its group, nobody else); the state directory is shared by the programs (the spend gate's
# commitments) and the guardrails daemon (its snapshots), setgid so new files keep the group.
ENV_MODE = 0o640
STATE_DIR_MODE = 0o2770
STATE_FILE_MODE = 0o660
LOG_DIR_MODE = 0o750
MAX_INCLUDE_DEPTH = 8


class InstallError(Exception):
    """Bad input for install; the message is one line."""


@dataclass(frozen=True)
class Account:
    """SlurmUser: who runs the programs (slurmctld runs them as SlurmUser)."""

    user: str
    uid: int
    group: str
    gid: int
    gids: frozenset[int]


def account(user: str) -> Account:
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise InstallError(
            f"--slurm-user {user!r}: no such user on this host; give SlurmUser of slurm.conf "
            "(the user slurmctld runs the programs as)"
        ) from None
    try:
        group = grp.getgrgid(pw.pw_gid).gr_name
    except KeyError:  # a primary group with no name: systemd's Group= takes the number too
        group = str(pw.pw_gid)
    extra = {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    return Account(user, pw.pw_uid, group, pw.pw_gid, frozenset({pw.pw_gid, *extra}))


def _allowed(st: os.stat_result, who: Account, bit: int) -> bool:
    if who.uid == 0:
        return True
    if st.st_uid == who.uid:
        return bool(st.st_mode & (bit << 6))
    if st.st_gid in who.gids:
        return bool(st.st_mode & (bit << 3))
    return bool(st.st_mode & bit)


def can(who: Account, path: Path, bit: int) -> bool:
    """Whether ``who`` may reach ``path`` (x on every directory above it) and ``bit`` it
    (4 read, 2 write, 1 execute) by its mode bits (ACLs are not read)."""
    path = path.absolute()
    try:
        for parent in reversed(path.parents):
            if not _allowed(parent.stat(), who, 1):
                return False
        return _allowed(path.stat(), who, bit)
    except OSError:
        return False


def cli_argv() -> list[str]:
    """This installation's coreburst by absolute path (a venv's bin directory is kept as it is,
    not resolved: its python is a link out of the venv), then ``burst``."""
    exe = Path(sys.executable).absolute()
    script = exe.parent / "coreburst"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), "burst"]
    found = shutil.which("coreburst")
    if found:
        return [str(Path(found).absolute()), "burst"]
    return [str(exe), "-m", "coreburst", "burst"]


def read_site_conf(path: Path, depth: int = 0, *, after: bool = False) -> list[ConfLine]:
    """The site's slurm.conf and the files it includes (not burst.conf), in Slurm's order."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InstallError(f"cannot read {path}: {exc.strerror}") from None
    out: list[ConfLine] = []
    for no, raw in enumerate(text.splitlines(), 1):
        if is_fragment_include(raw.split("#", 1)[0]):
            after = True
            continue
        target = include_target(raw)
        if target is not None:
            if depth >= MAX_INCLUDE_DEPTH:
                raise InstallError(f"{path}:{no}: Include nested deeper than {depth}")
            inc = Path(target) if target.startswith("/") else path.parent / target
            if inc.is_file():
                out += read_site_conf(inc, depth + 1, after=after)
            continue
        out += parse_conf_text(raw, path.name, after=after, start=no)
    return out


def site_slurm_user(site: list[ConfLine]) -> str:
    """SlurmUser as slurm.conf sets it; Slurm's own default is root."""
    users = [c.value for c in site if c.key.lower() == "slurmuser"]
    return users[-1] if users else "root"


# -- what each file should hold (pure) --------------------------------------------------------


def env_text(current: str | None, stack: BurstStack) -> str:
    """The env file with its marked block set to the stack's values; other lines kept."""
    region = stack.config.region
    block = "\n".join(
        [
            BEGIN_ENV,
            "# Sourced by the coreburst burst power programs (slurmctld runs them as SlurmUser).",
            f"export COREBURST_STACK={shlex.quote(stack.name)}",
            f"export AWS_REGION={shlex.quote(region)}",
            f"export AWS_DEFAULT_REGION={shlex.quote(region)}",
            END_ENV,
        ]
    )
    if current is None:
        return (
            block + "\n# Site settings below are kept by install: e.g. AWS_PROFILE=..., or\n"
            "# AWS_SHARED_CREDENTIALS_FILE=<a file owned by SlurmUser, mode 0600>; an instance\n"
            "# profile needs nothing. Never commit this file.\n"
        )
    pattern = re.compile(
        rf"^{re.escape(BEGIN_ENV)}\n.*?^{re.escape(END_ENV)}\n?", re.MULTILINE | re.DOTALL
    )
    if pattern.search(current):
        return pattern.sub(lambda _m: block + "\n", current, count=1)
    return block + "\n" + current


def include_line(prefix: Path, slurm_conf: Path) -> str:
    """By bare name next to slurm.conf (what configless slurmd receive), else by path."""
    name = "burst.conf" if prefix == slurm_conf.parent else str(prefix / "burst.conf")
    return f"Include {name}"


def slurm_conf_text(current: str, line: str) -> str:
    """slurm.conf with one Include of burst.conf, at its end (after the site's own lines)."""
    lines = current.splitlines()
    found = [i for i, ln in enumerate(lines) if is_fragment_include(ln.split("#", 1)[0])]
    if found:
        lines[found[0]] = line
        for i in reversed(found[1:]):
            del lines[i]
        return "\n".join(lines) + "\n"
    sep = "" if not current or current.endswith("\n") else "\n"
    return f"{current}{sep}# The burst nodes (coreburst burst install); keep it last.\n{line}\n"


def gres_conf_text(current: str | None, gres: str) -> str:
    block = f"{BEGIN_GRES}\n{gres.rstrip()}\n{END_GRES}\n"
    if current is None:
        return block
    if _GRES_BLOCK.search(current):
        return _GRES_BLOCK.sub(lambda _m: block, current, count=1)
    sep = "" if not current or current.endswith("\n") else "\n"
    return current + sep + block


def agent_unit(stack: BurstStack, argv: list[str], stack_dir: Path, who: Account) -> str:
    sock = stack.settings.agent_socket
    assert sock is not None
    run = Path("/run")
    runtime = (
        [f"RuntimeDirectory={sock.parent.relative_to(run)}", "RuntimeDirectoryMode=0755"]
        if sock.parent.is_relative_to(run) and sock.parent != run
        else []
    )
    command = shlex.join(
        [*argv, "agent", "--stack", stack.name, "--stack-dir", str(stack_dir), "--socket",
         str(sock)]
    )  # fmt: skip
    return "\n".join(
        [
            f"# coreburst burst agent for stack {stack.name} (written by coreburst burst install)",
            "[Unit]",
            f"Description=coreburst burst agent (warm power programs, stack {stack.name})",
            "Wants=network-online.target",
            "After=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            f"User={who.user}",
            f"Group={who.group}",
            f"ExecStart={command}",
            *runtime,
            # Runs in flight finish when the agent stops or restarts (coreburst/burst/agent.py).
            "KillMode=process",
            "Restart=always",
            "RestartSec=5",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


# -- the steps --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One path as install leaves it. ``content`` None: a directory, or a file whose text is
    not install's (only its owner and mode are); ``uid``/``gid``/``mode`` None: as found (or
    root and the umask's for a new one)."""

    path: Path
    is_dir: bool
    content: str | None = None
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    # Only when it already exists (a log or state file someone else creates).
    existing_only: bool = False


@dataclass
class Plan:
    targets: list[Target] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    slurm_files: set[Path] = field(default_factory=set)
    unit: Path | None = None

    def add(self, target: Target) -> None:
        if all(t.path != target.path for t in self.targets):
            self.targets.append(target)


@dataclass(frozen=True)
class Options:
    stack_dir: Path
    slurm_conf: Path
    prefix: Path | None
    env_file: Path
    state_dir: Path
    systemd_dir: Path
    slurm_user: str | None
    cli: list[str] | None
    slurm_release: tuple[int, int] | None


def _new_dirs(plan: Plan, path: Path) -> None:
    """Directories above ``path`` that do not exist yet: created root 0755."""
    missing = [p for p in reversed(path.parents) if not p.exists()]
    for p in missing:
        plan.add(Target(p, True, mode=0o755, uid=0, gid=0))


def _gate_state(stack: BurstStack) -> Path | None:
    gate = stack.settings.spend_gate
    if gate is None:
        return None
    from coreburst.burst.config import gate_limits
    from infra.config import StackConfigError

    try:
        return gate_limits(gate).state_path.absolute()
    except StackConfigError as exc:
        raise InstallError(str(exc)) from None


# Directories install never re-owns, even when named as a state or socket directory.
SYSTEM_DIRS = frozenset(
    Path(p)
    for p in ("/", "/etc", "/opt", "/run", "/srv", "/tmp", "/usr", "/usr/local", "/var",
              "/var/lib", "/var/log", "/var/tmp", "/home", "/root")
)  # fmt: skip


def _read(path: Path) -> str | None:
    """A file install edits (slurm.conf, gres.conf, the env file); None when missing."""
    if not path.exists():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
        raise InstallError(f"cannot read {path}: {why}") from None


@dataclass(frozen=True)
class _Context:
    """What every part of the plan needs, checked."""

    stack: BurstStack
    opts: Options
    site: list[ConfLine]
    who: Account
    argv: list[str]
    stack_dir: Path
    prefix: Path
    gate_state: Path | None


def _context(stack: BurstStack, opts: Options) -> _Context:
    s = stack.settings
    if not opts.slurm_conf.is_file():
        raise InstallError(
            f"--slurm-conf {opts.slurm_conf}: no such file; give the slurm.conf slurmctld reads"
        )
    site = read_site_conf(opts.slurm_conf)
    who = account(opts.slurm_user or site_slurm_user(site))
    conf_dir = opts.slurm_conf.absolute().parent
    prefix = (opts.prefix or conf_dir).absolute()
    if s.node is not None and s.node.conf_mode == "configless" and prefix != conf_dir:
        raise InstallError(
            f"--prefix {prefix}: stack {stack.name}'s burst nodes are configless "
            "(coreburst:burst.node), and slurmctld sends them an Include only by bare name "
            f"from slurm.conf's directory: use --prefix {conf_dir}"
        )
    argv = opts.cli or cli_argv()
    if not Path(argv[0]).is_absolute():
        raise InstallError(
            f"--cli {shlex.join(argv)!r}: start with an absolute path (slurmctld runs the "
            "programs with a bare PATH)"
        )
    stack_dir = opts.stack_dir.absolute()
    stack_file = stack_dir / f"Pulumi.{stack.name}.yaml"
    if not can(who, stack_file, 4):
        raise InstallError(
            f"SlurmUser {who.user} cannot read {stack_file} (the programs read it at every "
            "run): copy it to a directory it can read, e.g. /etc/coreburst, and pass "
            "--stack-dir there"
        )
    for exe in _interpreters(Path(argv[0])):
        if not can(who, exe, 1):
            raise InstallError(
                f"SlurmUser {who.user} cannot run {exe}: install coreburst where it can "
                "(e.g. python3 -m venv /opt/coreburst), or pass --cli"
            )
    state = opts.state_dir.absolute()
    if state in SYSTEM_DIRS:
        raise InstallError(
            f"--state-dir {state}: a system directory, which install would hand to SlurmUser; "
            "give one of its own, e.g. /var/lib/coreburst"
        )
    gate_state = _gate_state(stack)
    gate = s.spend_gate
    if gate_state is not None and gate is not None:
        if not can(who, gate.guardrails_config.absolute(), 4):
            raise InstallError(
                f"SlurmUser {who.user} cannot read {gate.guardrails_config} "
                "(coreburst:burst.spendGate.guardrailsConfig): the resume program prices every "
                "launch against it; make it readable by that user or its group"
            )
        if gate_state.parent != state:
            raise InstallError(
                f"--state-dir {opts.state_dir}: the spend gate commits into {gate_state} "
                f"(state.path in {gate.guardrails_config}); pass --state-dir "
                f"{gate_state.parent}"
            )
    return _Context(stack, opts, site, who, argv, stack_dir, prefix, gate_state)


def _slurm_targets(p: Plan, c: _Context, now: datetime) -> None:
    """burst.conf and the reservations script in the prefix; slurm.conf's Include line;
    gres.conf's block."""
    fragment = render_slurm_include(c.stack, slurm_release=c.opts.slurm_release, site=c.site)
    p.warnings += conflicts(fragment, c.site)
    resv = "#!/bin/sh\n# Hold Capacity Block nodes outside their block.\nset -e\n" + "".join(
        f"{cmd}\n" for cmd in reservation_commands(c.stack, now)
    )
    _new_dirs(p, c.prefix / "burst.conf")
    for name, text, mode in (("burst.conf", fragment, 0o644), (RESERVATIONS, resv, 0o755)):
        p.add(Target(c.prefix / name, False, text, mode, 0, 0))
    conf = c.opts.slurm_conf.absolute()
    p.add(Target(conf, False, slurm_conf_text(_read(conf) or "", include_line(c.prefix, conf))))
    gres_conf = conf.parent / "gres.conf"
    gres = gres_conf_text(_read(gres_conf), render_gres(c.stack))
    p.add(Target(gres_conf, False, gres, 0o644, 0, 0))
    p.slurm_files = {c.prefix / "burst.conf", conf, gres_conf}


def _program_targets(p: Plan, c: _Context) -> None:
    """The three programs where burst.conf says slurmctld runs them, and their env file."""
    s = c.stack.settings
    env_file = c.opts.env_file.absolute()
    for kind, target in (
        ("resume", s.resume_program),
        ("suspend", s.suspend_program),
        ("resume-fail", s.resume_fail_program),
    ):
        path = Path(target)
        if not path.is_absolute():
            raise InstallError(f"coreburst:burst: the {kind} program {target!r} is not absolute")
        _new_dirs(p, path)
        text = render_program(kind, c.stack, c.argv, str(c.stack_dir), str(env_file))
        p.add(Target(path, False, text, 0o755, 0, 0))
    _new_dirs(p, env_file)
    p.add(Target(env_file, False, env_text(_read(env_file), c.stack), ENV_MODE, 0, c.who.gid))


def _written_by_slurm_user(p: Plan, c: _Context) -> None:
    """The programs' logs and claims, and the state directory the spend gate commits into."""
    s, who = c.stack.settings, c.who
    claims = s.claims_file or s.audit_log.with_name("burst-claims.sqlite")
    for f in (s.log_file, s.audit_log, claims):
        d = f.absolute().parent
        if not d.exists() or ("coreburst" in d.name and d not in SYSTEM_DIRS):
            _new_dirs(p, d)
            p.add(Target(d, True, mode=LOG_DIR_MODE, uid=who.uid, gid=who.gid))
        elif not can(who, d, 2 | 1):
            raise InstallError(
                f"SlurmUser {who.user} cannot write in {d} ({f.name}'s directory): set "
                "coreburst:burst.logFile / auditLog / claimsFile under a directory of their "
                "own, e.g. /var/log/coreburst"
            )
    for f in (s.log_file, s.audit_log, *_sqlite_files(claims)):
        p.add(Target(f.absolute(), False, uid=who.uid, gid=who.gid, existing_only=True))
    state = c.opts.state_dir.absolute()
    _new_dirs(p, state)
    p.add(Target(state, True, mode=STATE_DIR_MODE, uid=who.uid, gid=who.gid))
    if c.gate_state is None:
        return
    for f in _sqlite_files(c.gate_state):
        p.add(Target(f, False, mode=STATE_FILE_MODE, gid=who.gid, existing_only=True))
    if not c.gate_state.exists():
        p.notes.append(
            f"the spend gate's state {c.gate_state} does not exist yet: the guardrails "
            "daemon writes it (run it as SlurmUser, or in its group with UMask=0007); "
            "until then every launch is held"
        )


def _agent_targets(p: Plan, c: _Context) -> None:
    sock = c.stack.settings.agent_socket
    if sock is None:
        return
    unit = c.opts.systemd_dir.absolute() / AGENT_UNIT
    _new_dirs(p, unit)
    p.add(Target(unit, False, agent_unit(c.stack, c.argv, c.stack_dir, c.who), 0o644, 0, 0))
    p.unit = unit
    if not sock.parent.is_relative_to("/run") or sock.parent in SYSTEM_DIRS:
        if sock.parent in SYSTEM_DIRS:
            raise InstallError(
                f"coreburst:burst.agentSocket {sock}: put it in a directory of its own, "
                "e.g. /run/coreburst/burst-agent.sock"
            )
        _new_dirs(p, sock.parent)
        p.add(Target(sock.parent, True, mode=0o755, uid=c.who.uid, gid=c.who.gid))


def plan(stack: BurstStack, opts: Options, now: datetime | None = None) -> Plan:
    """Everything install would leave on disk, checked; raises InstallError (one line)."""
    c = _context(stack, opts)
    p = Plan()
    _slurm_targets(p, c, now or datetime.now(UTC))
    _program_targets(p, c)
    _written_by_slurm_user(p, c)
    _agent_targets(p, c)
    _preflight(p)
    return p


def _sqlite_files(db: Path) -> list[Path]:
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]


def _interpreters(exe: Path) -> list[Path]:
    """The executable and the interpreter its #! line names (a venv's python)."""
    out = [exe]
    try:
        with exe.open("rb") as f:
            first = f.readline(512)
    except OSError:
        return out
    if first.startswith(b"#!"):
        words = first[2:].decode("utf-8", "replace").split()
        if words and words[0].startswith("/"):
            out.append(Path(words[0]))
    return out


def _preflight(p: Plan) -> None:
    """Every path can be written: its nearest existing directory is one and is writable."""
    for t in p.targets:
        if t.existing_only:
            continue
        if t.path.exists() and t.path.is_dir() != t.is_dir:
            kind = "directory" if t.is_dir else "file"
            raise InstallError(f"cannot install {t.path}: it exists and is not a {kind}")
        if t.is_dir and t.path.is_dir():
            continue  # only its owner and mode may change
        anc = t.path.parent
        while not anc.exists() and anc != anc.parent:
            anc = anc.parent
        if not anc.is_dir():
            raise InstallError(f"cannot write {t.path}: {anc} is not a directory")
        if not os.access(anc, os.W_OK | os.X_OK):
            raise InstallError(f"cannot write {t.path}: {anc} is not writable here")


# -- applying ---------------------------------------------------------------------------------


def _owner(uid: int, gid: int) -> str:
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return f"{user}:{group}"


def _describe(mode: int, uid: int, gid: int) -> str:
    return f"{stat.S_IMODE(mode):04o} {_owner(uid, gid)}"


def _write(path: Path, text: str, mode: int, uid: int, gid: int) -> None:
    """Atomically: a reader (slurmctld, a power program) never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chown(tmp, uid, gid)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def apply(p: Plan, *, dry_run: bool, echo: Callable[[str], None]) -> list[Path]:
    """Bring every target to its state; echo one line per change. Returns what changed."""
    changes: list[Path] = []
    create, write, set_ = (
        ("would create", "would write", "would set") if dry_run else ("created", "wrote", "set")
    )
    for t in p.targets:
        exists = t.path.exists()
        if t.existing_only and not exists:
            continue
        st = t.path.stat() if exists else None
        mode = t.mode if t.mode is not None else (stat.S_IMODE(st.st_mode) if st else 0o644)
        uid = t.uid if t.uid is not None else (st.st_uid if st else 0)
        gid = t.gid if t.gid is not None else (st.st_gid if st else 0)
        if t.is_dir:
            if st is None:
                if not dry_run:
                    t.path.mkdir()
                    os.chown(t.path, uid, gid)
                    os.chmod(t.path, mode)
                echo(f"{create} {t.path}/ ({_describe(mode, uid, gid)})")
                changes.append(t.path)
                continue
        elif t.content is not None:
            old = t.path.read_text(encoding="utf-8", errors="replace") if exists else None
            if old != t.content:
                if not dry_run:
                    _write(t.path, t.content, mode, uid, gid)
                echo(f"{write} {t.path} ({_describe(mode, uid, gid)})")
                changes.append(t.path)
                continue
        assert st is not None
        if (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) != (mode, uid, gid):
            if not dry_run:
                os.chown(t.path, uid, gid)
                os.chmod(t.path, mode)
            was = _describe(st.st_mode, st.st_uid, st.st_gid)
            echo(f"{set_} {t.path} to {_describe(mode, uid, gid)} (was {was})")
            changes.append(t.path)
    return changes


def checked(p: Plan) -> int:
    """How many paths install looked after (for its summary)."""
    return sum(1 for t in p.targets if not t.existing_only or t.path.exists())
