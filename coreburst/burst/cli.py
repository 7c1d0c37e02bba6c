"""``coreburst burst``: Slurm configuration and power programs for burst nodes.

$ coreburst burst slurm-conf --stack prod --out /etc/slurm/coreburst
$ sudo /opt/coreburst/bin/coreburst burst install --stack prod --stack-dir /etc/coreburst
$ coreburst burst resume 'p5-[1-4]' --stack prod        # run by slurmctld
$ coreburst burst suspend 'p5-[1-4]' --stack prod
$ coreburst burst iam-policy --stack prod --account 123456789012 > burst-controller.json
$ coreburst burst guardrails-iam-policy --stack burst > docs/iam/onprem-guardrails.json
$ coreburst burst release-hold od --stack prod --reason "capacity back in use1-az4"
$ coreburst burst node-check --node p5-1 --stack prod --gate   # on the node, before slurmd
$ coreburst burst status --stack prod --format json
$ coreburst burst check --stack prod                   # read-only preflight of account and Slurm
"""

from __future__ import annotations

import json
import logging
import os
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from coreburst.burst import programs
from coreburst.burst.config import BurstStack, load_burst_stack
from coreburst.burst.power import (
    Audit,
    Power,
)
from coreburst.burst.slurmconf import (
    render_gres,
    render_program,
    render_slurm_include,
    reservation_commands,
)
from coreburst.common.catalog import CatalogError
from coreburst.common.slurmcmd import installed_release, parse_release
from guardrails.adapters.slurm import Scontrol
from infra.config import StackConfigError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Overflow the on-prem Slurm queue to AWS: Slurm config and power programs.",
)

StackOpt = Annotated[str, typer.Option("--stack", "-s", help="Pulumi stack name.")]
StackDirOpt = Annotated[
    Path, typer.Option("--stack-dir", help="Directory holding Pulumi.<stack>.yaml.")
]
# Stacks are read from the current directory unless --stack-dir names another (as `pulumi`).
HERE = Path(".")
HostlistArg = Annotated[str, typer.Argument(help="Slurm hostlist, e.g. p5-[1-4].")]


_escaped = programs.escaped


def _fail(msg: str) -> typer.Exit:
    typer.echo(f"error: {msg}", err=True)
    return typer.Exit(2)


def _stack(stack: str, stack_dir: Path) -> BurstStack:
    try:
        return load_burst_stack(stack, stack_dir)
    except (StackConfigError, CatalogError) as exc:
        raise _fail(str(exc)) from None


SlurmReleaseOpt = Annotated[
    str | None,
    typer.Option(
        help="The controller's Slurm release (e.g. 22.05), which some lines depend on; "
        "default: the Slurm installed here (slurmctld -V, else scontrol -V)."
    ),
]


def _release(slurm_release: str | None) -> tuple[int, int] | None:
    if slurm_release is not None:
        release = parse_release(slurm_release)
        if release is None or release[0] < 20:
            raise _fail(f"--slurm-release {slurm_release!r}: not a Slurm release; e.g. 24.11")
        return release
    release = installed_release()
    if release is None:
        typer.echo(
            "warning: no Slurm here to tell the controller's release: rendered "
            "for 23.02 and later (on 22.05 pass --slurm-release 22.05)",
            err=True,
        )
    return release


@app.command("slurm-conf")
def slurm_conf(  # noqa: PLR0917 (typer: one parameter per option)
    stack: StackOpt,
    stack_dir: StackDirOpt = HERE,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write burst.conf, gres-burst.conf, reservations.sh and the programs "
            "here instead of printing."
        ),
    ] = None,
    cli: Annotated[
        str,
        typer.Option(
            help="Command the rendered programs run (before 'resume ...'); slurmctld runs "
            "them with a bare PATH, so give coreburst's absolute path, e.g. "
            "'/opt/coreburst/bin/coreburst burst' (coreburst burst install does)."
        ),
    ] = "coreburst burst",
    env_file: Annotated[
        str, typer.Option(help="Shell file the programs source first (export AWS_... there).")
    ] = "/etc/coreburst/burst.env",
    slurm_release: SlurmReleaseOpt = None,
    site_conf: Annotated[
        Path | None,
        typer.Option(
            help="The site's slurm.conf: its SlurmctldParameters, CommunicationParameters and "
            "PrivateData entries are kept in the fragment's lines, and every setting the "
            "fragment overrides is named on stderr."
        ),
    ] = None,
    controller_stack_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where the controller keeps the stack file, which the rendered programs "
            "read (rendering elsewhere for Ansible); default: --stack-dir, made absolute."
        ),
    ] = None,
) -> None:
    """Render the burst side of slurm.conf (an Include) and gres.conf from the stack."""
    if controller_stack_dir is not None and not controller_stack_dir.is_absolute():
        raise _fail(f"--controller-stack-dir {controller_stack_dir}: give an absolute path")
    release = _release(slurm_release)
    s = _stack(stack, stack_dir)
    site = None
    if site_conf is not None:
        from coreburst.burst.install import InstallError, read_site_conf

        if not site_conf.is_file():
            raise _fail(f"--site-conf {site_conf}: no such file; give the site's slurm.conf")
        try:
            site = read_site_conf(site_conf)
        except InstallError as exc:
            raise _fail(str(exc)) from None
    include = render_slurm_include(s, slurm_release=release, site=site)
    if site is not None:
        from coreburst.burst.merge import conflicts

        for line in conflicts(include, site):
            typer.echo(f"warning: {line}", err=True)
    gres = render_gres(s)
    resv = reservation_commands(s, datetime.now(UTC))
    resv_sh = "#!/bin/sh\n# Hold Capacity Block nodes outside their block.\nset -e\n" + "".join(
        f"{c}\n" for c in resv
    )
    if out is None:
        typer.echo("# ===== slurm.conf include =====")
        typer.echo(include, nl=False)
        typer.echo("# ===== gres.conf =====")
        typer.echo(gres, nl=False)
        typer.echo("# ===== reservations (run once on the controller) =====")
        typer.echo(resv_sh, nl=False)
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "burst.conf").write_text(include)
        (out / "gres-burst.conf").write_text(gres)
        (out / "reservations.sh").write_text(resv_sh)
        (out / "reservations.sh").chmod(0o755)
        argv = shlex.split(cli)
        programs = {
            "resume": s.settings.resume_program,
            "suspend": s.settings.suspend_program,
            "resume-fail": s.settings.resume_fail_program,
        }
        for kind, target in programs.items():
            p = out / Path(target).name
            where = controller_stack_dir or stack_dir.resolve()
            p.write_text(render_program(kind, s, argv, str(where), env_file))
            p.chmod(0o755)
    except OSError as exc:
        raise _fail(f"cannot write {out}: {exc.strerror}") from None
    typer.echo(f"wrote {out}: burst.conf, gres-burst.conf, reservations.sh and 3 programs")


@app.command()
def install(  # noqa: PLR0917 (typer: one parameter per option)
    stack: StackOpt,
    stack_dir: StackDirOpt = HERE,
    slurm_conf: Annotated[
        Path, typer.Option(help="The slurm.conf slurmctld reads (gets one Include line).")
    ] = Path("/etc/slurm/slurm.conf"),
    prefix: Annotated[
        Path | None,
        typer.Option(
            help="Where burst.conf and coreburst-reservations.sh go; default: slurm.conf's "
            "directory (configless burst nodes need it there)."
        ),
    ] = None,
    env_file: Annotated[
        Path, typer.Option(help="The file the programs source (root:SlurmGroup 0640).")
    ] = Path("/etc/coreburst/burst.env"),
    state_dir: Annotated[
        Path,
        typer.Option(
            help="Where the spend gate writes its commitments (the guardrails state's "
            "directory): SlurmUser's, 2770."
        ),
    ] = Path("/var/lib/coreburst"),
    slurm_user: Annotated[
        str | None,
        typer.Option(help="SlurmUser, who runs the programs; default: slurm.conf's SlurmUser."),
    ] = None,
    systemd_dir: Annotated[
        Path, typer.Option(help="Where the agent's unit goes (coreburst:burst.agentSocket).")
    ] = Path("/etc/systemd/system"),
    cli: Annotated[
        str | None,
        typer.Option(help="Command the programs run; default: this coreburst's absolute path."),
    ] = None,
    slurm_release: SlurmReleaseOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would change; write nothing.")
    ] = False,
) -> None:
    """Install the controller side on the slurmctld host, as root: burst.conf and its Include, gres.conf's burst block, the three programs (absolute paths), the env file, the agent unit, and the directories SlurmUser writes. A second run changes nothing.

    $ sudo /opt/coreburst/bin/coreburst burst install --stack prod --stack-dir /etc/coreburst"""  # noqa: E501
    from coreburst.burst import install as inst

    release = _release(slurm_release)
    s = _stack(stack, stack_dir)
    if os.geteuid() != 0 and not dry_run:
        raise _fail("install sets owners (root, SlurmUser): run it as root (sudo), or --dry-run")
    try:
        argv = shlex.split(cli) if cli is not None else None
        opts = inst.Options(
            stack_dir=stack_dir,
            slurm_conf=slurm_conf,
            prefix=prefix,
            env_file=env_file,
            state_dir=state_dir,
            systemd_dir=systemd_dir,
            slurm_user=slurm_user,
            cli=argv or None,
            slurm_release=release,
        )
        plan = inst.plan(s, opts)
    except ValueError as exc:
        raise _fail(f"--cli: {exc} (quote it as a shell would)") from None
    except inst.InstallError as exc:
        raise _fail(str(exc)) from None
    for line in plan.warnings:
        typer.echo(f"warning: {line}", err=True)
    try:
        changed = inst.apply(plan, dry_run=dry_run, echo=typer.echo)
    except OSError as exc:
        raise _fail(f"install stopped at {exc.filename}: {exc.strerror}") from None
    checked = inst.checked(plan)
    if not changed:
        typer.echo(f"nothing to change: stack {stack} is installed ({checked} paths checked)")
    else:
        done = "would change" if dry_run else "changed"
        typer.echo(f"{done} {len(changed)} of {checked} paths for stack {stack}")
    for note in plan.notes:
        typer.echo(f"note: {note}")
    if changed and not dry_run:
        if plan.slurm_files & set(changed):
            typer.echo(
                "next: scontrol reconfigure (restart slurmctld instead when burst nodes were "
                "added or removed; on Slurm 22.05 every slurmd too)"
            )
        if plan.unit is not None:  # an upgrade too: the agent's children run its code
            typer.echo(
                "next: systemctl daemon-reload && systemctl enable coreburst-burst-agent && "
                "systemctl restart coreburst-burst-agent"
            )


def _setup_logs(s: BurstStack) -> Audit:
    try:
        return programs.setup_logs(s)
    except programs.ProgramExit as exc:
        raise typer.Exit(exc.code) from None


def _power(stack: str, stack_dir: Path, kind: str) -> Power:
    """The power program (coreburst/burst/programs.py, which the rendered programs run
    without typer when called in their own layout)."""
    try:
        return programs.build(stack, stack_dir, kind)
    except programs.ProgramExit as exc:
        raise typer.Exit(exc.code) from None


def _run(program: str, power: Power, action: str, hostlist: str) -> None:
    code = programs.run(program, power, action, hostlist)
    if code:
        raise typer.Exit(code)


@app.command()
def resume(hostlist: HostlistArg, stack: StackOpt, stack_dir: StackDirOpt = HERE) -> None:
    """ResumeProgram: launch instances for the nodes (reads SLURM_RESUME_FILE)."""
    _run("resume", _power(stack, stack_dir, "resume"), "resume", hostlist)


@app.command()
def suspend(hostlist: HostlistArg, stack: StackOpt, stack_dir: StackDirOpt = HERE) -> None:
    """SuspendProgram: terminate the nodes' instances."""
    _run("suspend", _power(stack, stack_dir, "suspend"), "suspend", hostlist)


@app.command("resume-fail")
def resume_fail(hostlist: HostlistArg, stack: StackOpt, stack_dir: StackDirOpt = HERE) -> None:
    """ResumeFailProgram: a node did not register in ResumeTimeout; terminate its instance."""
    _run("resume-fail", _power(stack, stack_dir, "resume-fail"), "resume-fail", hostlist)


@app.command("iam-policy")
def iam_policy(
    stack: StackOpt,
    stack_dir: StackDirOpt = HERE,
    account: Annotated[
        str, typer.Option(help="The stack's 12-digit AWS account id; * when not given.")
    ] = "*",
) -> None:
    """Print the least-privilege IAM policy (JSON) for the controller host's AWS credentials: what resume, suspend and resume-fail call, on this stack's resources only."""  # noqa: E501
    from coreburst.burst.iam import controller_policy

    s = _stack(stack, stack_dir)
    try:
        doc = controller_policy(s, account=account)
    except ValueError as exc:
        raise _fail(f"--account: {exc}") from None
    typer.echo(json.dumps(doc, indent=2))


@app.command("guardrails-iam-policy")
def guardrails_iam_policy(
    stack: StackOpt,
    stack_dir: StackDirOpt = HERE,
    account: Annotated[
        str, typer.Option(help="The stack's 12-digit AWS account id; * when not given.")
    ] = "*",
    rule: Annotated[
        list[str] | None, typer.Option(help="A rule the daemon runs (repeat); default: all.")
    ] = None,
) -> None:
    """Print the IAM policy (JSON) for the guardrails daemon on the controller host, run with its own AWS credentials: what its rules declare, writes only on the stack's tagged resources, the stack's spot events (and budget) queue only; no DynamoDB, Secrets Manager or Logs (its state is SQLite)."""  # noqa: E501
    from coreburst.common.names import STACK_TAG_KEY
    from guardrails.rules import REGISTRY
    from infra.guardrails_iam import onprem_policy_document

    s = _stack(stack, stack_dir)
    names = sorted(REGISTRY) if not rule else sorted({"inventory", *rule})
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise _fail(f"--rule: unknown rule(s) {', '.join(unknown)}; known: {', '.join(REGISTRY)}")
    try:
        doc = onprem_policy_document(
            {n: REGISTRY[n].iam_actions for n in names},
            STACK_TAG_KEY,
            s.name,
            region=s.config.region,
            account=account,
        )
    except ValueError as exc:
        raise _fail(f"--account: {exc}") from None
    typer.echo(json.dumps(doc, indent=2))


@app.command("release-hold")
def release_hold(
    pool: Annotated[str, typer.Argument(help="The pool (cluster) name, e.g. od.")],
    stack: StackOpt,
    stack_dir: StackDirOpt = HERE,
    reason: Annotated[str, typer.Option(help="Why, for the audit log.")] = "",
) -> None:
    """Lift the capacity backoff and protected mode on a burst pool now; it stays lifted until the pool fails again (audited as operator.released).

    The burst-reconcile rule counts only the pool's failures after this release."""  # noqa: E501
    import getpass
    import os
    import sqlite3

    from coreburst.burst.holds import OPERATOR_RELEASED
    from coreburst.common.names import BACKOFF_PREFIX, PROTECT_PREFIX

    s = _stack(stack, stack_dir)
    pools = sorted({c.name for c in s.config.clusters})
    if pool not in pools:
        raise _fail(f"no pool {pool!r} in stack {stack} (its pools: {', '.join(pools)})")
    audit = _setup_logs(s)
    log = logging.getLogger("coreburst.burst.power")
    slurm = Scontrol()
    try:
        names = [
            line.split()[0].partition("=")[2]
            for line in slurm.scontrol("-o", "show", "reservation").splitlines()
            if line.startswith("ReservationName=")
        ]
        mine = [
            n
            for n in names
            if n.startswith(f"{BACKOFF_PREFIX}{pool}-") or n == PROTECT_PREFIX + pool
        ]
        for name in mine:
            slurm.scontrol("delete", f"ReservationName={name}")
    except RuntimeError as exc:  # guardrails.adapters.slurm.SlurmError: one line
        raise _fail(f"scontrol: {exc}") from None
    from coreburst.burst.claims import Claims

    claims_path = s.settings.claims_file or s.settings.audit_log.with_name("burst-claims.sqlite")
    try:  # the (instance type, zone) choices the resume program backed off
        forgiven = Claims(claims_path).forgive(pool)
    except (OSError, sqlite3.Error) as exc:
        raise _fail(f"claims {claims_path}: {exc}") from None
    who = os.environ.get("SUDO_USER") or getpass.getuser()
    audit(
        OPERATOR_RELEASED,
        pool=pool,
        reservations=mine,
        choices_lifted=forgiven,
        by=who,
        reason=_escaped(reason),
    )
    log.warning("pool %s released by %s (%s): %s", pool, who, reason or "-", mine or "no hold")
    if mine:
        typer.echo(f"released pool {pool}: deleted {', '.join(mine)}")
    else:
        typer.echo(f"pool {pool} had no backoff or protected-mode hold; earlier failures forgiven")


@app.command("node-check")
def node_check(  # noqa: PLR0917 (one parameter per CLI option)
    node: Annotated[
        str | None, typer.Option(help="This node's Slurm name (required with --gate).")
    ] = None,
    stack: Annotated[
        str | None, typer.Option("--stack", "-s", help="Pulumi stack: the node's type, audit log.")
    ] = None,
    stack_dir: StackDirOpt = HERE,
    instance_type: Annotated[
        str | None, typer.Option(help="Instance type to expect (default: the node's in --stack).")
    ] = None,
    gate: Annotated[
        bool, typer.Option(help="On failure: node DOWN, job requeued, instance replaced.")
    ] = False,
    dcgm: Annotated[bool, typer.Option(help="Run dcgmi diag -r 1 -j.")] = True,
    nccl_command: Annotated[
        str | None, typer.Option(help="A command printing all_reduce_perf output to judge.")
    ] = None,
    nccl_min_busbw: Annotated[
        float | None, typer.Option(help="Least busbw (GB/s) at the largest size.")
    ] = None,
    replay: Annotated[
        Path | None, typer.Option(help="Read recorded outputs (<probe>.out) from this directory.")
    ] = None,
    instance_id: Annotated[str, typer.Option(help="This instance's id, for the record.")] = "",
) -> None:
    """Health gate for a fresh burst node, run before slurmd starts: GPUs (nvidia-smi, DCGM), EFA devices, optional all-reduce. Exit 0 passed, 1 failed, 2 bad input.

    $ coreburst burst node-check --node od-1 --stack prod --gate"""  # noqa: E501
    from coreburst.burst import node_check
    from coreburst.burst.slurmconf import node_set_of

    s = _stack(stack, stack_dir) if stack else None
    nodes = node_set_of(s) if s else {}
    if gate and not node:
        raise _fail("--gate needs --node (the Slurm node to take out on failure)")
    if s is not None and node is not None and node not in nodes:
        raise _fail(f"--node {_escaped(node)!r} is not a burst node of stack {stack}")
    itype = instance_type or (nodes[node].instance_type if node in nodes else None)
    if itype is None:
        raise _fail("give --instance-type, or --stack with --node, to know what to expect")
    if replay is not None and not replay.is_dir():
        raise _fail(f"--replay {replay}: no such directory")
    try:
        shlex.split(nccl_command or "")
    except ValueError as exc:
        raise _fail(f"--nccl-command: {exc} (quote it as a shell would)") from None
    try:
        expect = node_check.expected(itype)
    except node_check.HealthInputError as exc:
        raise _fail(str(exc)) from None
    audit = _setup_logs(s) if s is not None else None
    code = node_check.node_check(
        node,
        expect,
        runner=node_check.Replay(replay) if replay is not None else node_check.run_subprocess,
        dcgm=dcgm,
        nccl_command=nccl_command,
        nccl_min_busbw=nccl_min_busbw,
        gate=gate,
        instance_id=instance_id,
        audit=audit,
        echo=typer.echo,
    )
    raise typer.Exit(code)


@app.command()
def agent(
    stack: StackOpt,
    socket_path: Annotated[
        Path, typer.Option("--socket", help="Unix socket to serve (created 0600).")
    ],
    stack_dir: StackDirOpt = HERE,
) -> None:
    """Serve resume, suspend and resume-fail from one warm process (a fork per run), for the programs rendered with coreburst:burst.agentSocket; runs until SIGTERM.

    $ coreburst burst agent --stack prod --stack-dir /etc/coreburst --socket /run/coreburst/burst-agent.sock"""  # noqa: E501
    from coreburst.burst import agent as burst_agent

    s = _stack(stack, stack_dir)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(message)s"))
    log = logging.getLogger("coreburst.burst.agent")
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    limit = max(s.settings.resume_timeout, s.settings.suspend_timeout) + burst_agent.LIMIT_MARGIN_S
    try:
        listener = burst_agent.bind(socket_path)  # before the warm-up: a bad path fails at once
    except burst_agent.AgentError as exc:
        raise _fail(str(exc)) from None
    try:
        burst_agent.warm(s.config.region)
    except burst_agent.AgentError as exc:
        listener.close()
        socket_path.unlink(missing_ok=True)
        raise _fail(str(exc)) from None
    burst_agent.serve(listener, socket_path, stack, stack_dir.resolve(), limit_s=limit)


@app.command()
def status(  # noqa: PLR0917 (typer: one parameter per option)
    stack: StackOpt,
    stack_dir: StackDirOpt = HERE,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    watch: Annotated[bool, typer.Option("--watch", help="Print again every --interval.")] = False,
    interval: Annotated[
        float, typer.Option(help="Seconds between prints with --watch (at least 1).")
    ] = 10.0,
    count: Annotated[
        int | None, typer.Option(help="With --watch: stop after this many prints (default: ^C).")
    ] = None,
) -> None:
    """The burst as a whole: per pool nodes by state with reasons, holds and back-offs (EC2 code, until when), spend committed vs limit, waiting jobs, the last launches and failures, instances with no node and nodes with no instance. The guardrails daemon exports the same figures on its metrics endpoint. Exit 1 when a source could not be read (it is named).

    $ coreburst burst status --stack prod --stack-dir /etc/coreburst --watch --interval 5"""  # noqa: E501
    from coreburst.burst import status as st

    if fmt not in ("text", "json"):
        raise _fail(f"--format {fmt!r}: use text or json")
    if not interval >= 1:
        raise _fail(f"--interval {interval:g}: give at least 1 second")
    if count is not None and count < 1:
        raise _fail(f"--count {count}: give at least 1")
    if count is not None and not watch:
        raise _fail("--count goes with --watch")
    s = _stack(stack, stack_dir)
    src = _status_sources(s)

    def shown(doc: dict[str, Any]) -> str:
        return json.dumps(doc, indent=2) + "\n" if fmt == "json" else st.render(doc)

    if not watch:
        doc = st.read(src, datetime.now(UTC))
        typer.echo(shown(doc), nl=False)
        if doc["unknown"]:  # shown, but a script must not take a partial status as whole
            raise typer.Exit(1)
        return

    def once() -> str:
        return shown(st.read(src, datetime.now(UTC)))

    clear = "\x1b[H\x1b[2J" if fmt == "text" and os.isatty(1) else ""
    st.watch(once, lambda t: typer.echo(t, nl=False), interval_s=interval, count=count, clear=clear)


def _status_sources(s: BurstStack) -> Any:
    """Where ``status`` reads each fact for stack ``s`` (every call with a deadline)."""
    import boto3
    from botocore.config import Config

    from coreburst.burst import status as st
    from coreburst.burst.config import gate_limits

    ec2 = boto3.session.Session(region_name=s.config.region).client(
        "ec2",
        config=Config(connect_timeout=5, read_timeout=20, retries={"mode": "standard"}),
    )
    spend = None
    gate = s.settings.spend_gate
    if gate is not None:

        def spend() -> list[tuple[object, str, float | None, float | None]]:
            from coreburst.burst.gate import open_spend_state

            lim = gate_limits(gate)
            store = open_spend_state(lim.state_path)
            return [(store, lim.scope, lim.daily_limit_usd, lim.monthly_limit_usd)]

    return st.Sources(
        stack=s.name,
        slurm=Scontrol(timeout_s=30),
        ec2=[ec2],
        audit_log=s.settings.audit_log,
        spend=spend,
        node_tag_key=s.settings.node_tag_key,
    )


@app.command()
def check(  # noqa: PLR0917 (typer: one parameter per option)
    stack: StackOpt,
    stack_dir: StackDirOpt = HERE,
    fmt: Annotated[str, typer.Option("--format", help="text (one line a check) or json.")] = "text",
    strict: Annotated[
        bool, typer.Option(help="Exit 1 on ? (a question the credentials may not ask) too.")
    ] = False,
    principal: Annotated[
        str | None,
        typer.Option(
            help="The controller's IAM role or user ARN to simulate, when the check runs with "
            "other credentials (CI); the DryRun launches are then left out (they ask as the "
            "caller). Default: the caller."
        ),
    ] = None,
    skip: Annotated[
        list[str] | None,
        typer.Option(help="Leave out a section: aws, permissions or slurm (repeatable)."),
    ] = None,
    slurm_conf: Annotated[
        Path | None, typer.Option(help="slurm.conf scontrol reads (default: SLURM_CONF).")
    ] = None,
) -> None:
    """Preflight against the account and the Slurm controller: one line a check (✔ ✘ ?) with what was asked and the fix; exit 1 on ✘ (and on ? with --strict). Read-only.

    $ coreburst burst check --stack burst

    $ coreburst burst check --stack burst --skip slurm --format json --principal arn:aws:iam::123456789012:role/burst-controller"""  # noqa: E501
    from coreburst.burst import check as preflight
    from guardrails.preflight import (
        READ_TIMEOUT_S,
        Clients,
        exit_code,
        render_json,
        render_text,
    )

    if fmt not in ("text", "json"):
        raise _fail(f"--format {fmt!r}: use text or json")
    bad = sorted(set(skip or []) - set(preflight.SECTIONS))
    if bad:
        raise _fail(f"--skip {bad[0]!r}: use {', '.join(preflight.SECTIONS)}")
    if principal is not None and not preflight.IAM_ARN.fullmatch(principal):
        raise _fail(
            f"--principal {principal!r}: not an IAM role or user ARN; "
            "e.g. arn:aws:iam::123456789012:role/burst-controller"
        )
    s = _stack(stack, stack_dir)
    results = preflight.run_checks(
        s,
        Clients(s.config.region),
        scontrol=Scontrol(conf=slurm_conf, timeout_s=READ_TIMEOUT_S),
        principal=principal,
        skip=skip or (),
    )
    if fmt == "json":
        typer.echo(render_json(results, stack=stack, strict=strict), nl=False)
    else:
        typer.echo(render_text(results), nl=False)
    raise typer.Exit(exit_code(results, strict))


def main() -> None:
    app(prog_name="coreburst burst")


if __name__ == "__main__":
    main()
