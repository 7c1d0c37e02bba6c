"""A burst node joins the on-prem Slurm controller from its user data (issue 15, item 5).

What the join block does, and the documents it follows:

- IMDSv2: "Use the Instance Metadata Service to access instance metadata" / "Retrieve instance
  metadata" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html):
  ``PUT http://169.254.169.254/latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds``,
  then every GET with ``X-aws-ec2-metadata-token``.
- Tags in instance metadata: "View tags for your EC2 instances using instance metadata"
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/work-with-tags-in-IMDS.html): allowed per
  instance or launch template (``InstanceMetadataTags=enabled``), read at
  ``/latest/meta-data/tags/instance/<key>``; tags added while the instance runs appear there.
- Secrets Manager GetSecretValue
  (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html):
  ``SecretId`` (name or ARN), ``SecretBinary`` is base64-encoded in the response (the CLI prints
  it so with ``--output text``), ``SecretString`` otherwise; needs
  ``secretsmanager:GetSecretValue`` on the secret.
- SSM GetParameter (https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html):
  ``Name`` (name or ARN), ``WithDecryption`` for SecureString, ``Parameter.Value``; needs
  ``ssm:GetParameter`` on the parameter.
- Slurm configless (https://slurm.schedmd.com/configless_slurm.html) and slurmd(8)
  (https://slurm.schedmd.com/slurmd.html): ``--conf-server <host>[:<port>]`` ("Comma-separated
  list of controllers, the first being the primary slurmctld"), ``-N <nodename>`` ("Run the
  daemon with the given nodename"); slurmctld needs ``SlurmctldParameters=enable_configless``.
  Debian's slurmd.service reads ``SLURMD_OPTIONS`` from ``/etc/default/slurmd``.

The block runs for real in bash with the machine's coreutils and python3 (the health gate,
coreburst/burst/node_gate.py); ``curl``, ``aws``, ``systemctl``, ``chown``, ``scontrol``,
``slurmd``, ``munged`` and the gate's probes (``nvidia-smi``, ``dcgmi``, ``fi_info``, answering
from tests/fixtures/health) are FAKES MADE BY US (tests/helpers/node_boot.py), which answer as
the pages above document and record every call. tests/integration/burst/test_node_boot.py runs
the whole user data of the example burst stack in Debian with its real slurmd and munge.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import botocore.session
import pulumi
import pytest

from infra.config import StackConfigError
from infra.offline import FAKE_ACCOUNT, Evaluation, _Mocks, evaluate_config
from infra.userdata import JOIN_BEGIN, JOIN_END, SlurmJoin, render_slurm_join
from tests.helpers.burst import with_on_prem
from tests.helpers.node_boot import (
    FAKE_APT,
    FAKE_AWS,
    FAKE_CURL,
    FAKE_PROBE,
    HEALTH,
    PROBES,
    RECORDER,
    burst_user_data,
)

REPO = Path(__file__).resolve().parents[3]
REGION = "us-east-1"
SECRET_ARN = f"arn:aws:secretsmanager:{REGION}:{FAKE_ACCOUNT}:secret:coreburst-munge-AbCdEf"
PARAM_ARN = f"arn:aws:ssm:{REGION}:{FAKE_ACCOUNT}:parameter/coreburst/dev/slurm/conf-server"
CONF_SERVER = "slurmctl.corp.example:6817,slurmctl2.corp.example"
INSTANCE_ID = "i-0123456789abcdef0"
TOKEN = "AQAEAFakeToken=="
# A made-up munge key: 1024 random-looking bytes, as `mungekey` writes by default.
MUNGE_KEY = bytes((i * 37 + 11) % 256 for i in range(1024))


def _burst(config: dict[str, Any], **node: Any) -> dict[str, Any]:
    config["coreburst:burst"] = {
        "coreNodes": "dgx[01-04]",
        "node": {"confServer": "slurmctl.corp.example:6817", **node},
    }
    return with_on_prem(config)


def _script(ev: Evaluation, cluster: str) -> str:
    return base64.b64decode(ev.named(f"{cluster}-lt").inputs["userData"]).decode()


# -- the stack --------------------------------------------------------------------------------


def test_burst_stack_joins_and_plain_stacks_render_no_join_block(
    dev: Evaluation, prod: Evaluation, dev_config: dict[str, Any]
) -> None:
    for ev, clusters in ((dev, ["dev-p5"]), (prod, ["train-p5en", "train-trn2"])):
        for c in clusters:
            assert JOIN_BEGIN not in _script(ev, c)
            lt = ev.named(f"{c}-lt").inputs
            assert "instanceMetadataTags" not in lt["metadataOptions"]
            assert not [r for r in ev.resources if r.name == f"{c}-node-slurm-join"]
    ev = evaluate_config("dev", _burst(dev_config))
    script = _script(ev, "dev-p5")
    # The join comes last: after the Lustre mount that jobs need.
    assert script.index("mount -t lustre") < script.index(JOIN_BEGIN) < script.index(JOIN_END)
    assert "--conf-server $cb_conf" in script and "tags/instance/$cb_tag_key" in script
    assert "cb_tag_key=coreburst-slurm-node" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert ev.named("dev-p5-lt").inputs["metadataOptions"]["instanceMetadataTags"] == "enabled"
    param = ev.named("slurm-conf-server").inputs
    assert param["type"] == "String" and param["insecureValue"] == "slurmctl.corp.example:6817"
    assert param["name"] == "/coreburst/dev/slurm/conf-server"
    secret = ev.named("slurm-munge-key").inputs
    assert "secretString" not in secret and "secretBinary" not in secret  # key never in state
    assert not ev.of_type("aws:secretsmanager/secretVersion:SecretVersion")
    assert ev.outputs["slurmConfParameterArn"] and ev.outputs["slurmMungeKeySecretArn"]


def test_existing_secret_and_parameter_are_used_not_declared(dev_config: dict[str, Any]) -> None:
    cfg = _burst(dev_config, confServer=None, mungeKeySecretArn=SECRET_ARN)
    cfg["coreburst:burst"]["node"].update(
        confMode="file", slurmConfParameterArn=PARAM_ARN, confServer=None
    )
    del cfg["coreburst:burst"]["node"]["confServer"]
    ev = evaluate_config("dev", cfg)
    assert not ev.of_type("aws:secretsmanager/secret:Secret")
    assert not ev.of_type("aws:ssm/parameter:Parameter")
    policy = json.loads(ev.named("dev-p5-node-slurm-join").inputs["policy"])
    assert {s["Resource"] for s in policy["Statement"]} == {SECRET_ARN, PARAM_ARN}
    script = _script(ev, "dev-p5")
    assert f"cb_secret={SECRET_ARN}" in script and f"cb_param={PARAM_ARN}" in script
    # File mode: the node writes slurm.conf and its own gres.conf (8 H100s on a p5.48xlarge).
    assert "/etc/slurm/slurm.conf" in script and "File=/dev/nvidia[0-7]" in script


@pytest.mark.parametrize(
    ("burst", "message"),
    [
        ({"coreNodes": "dgx[01-04]"}, "coreburst:burst: node is missing"),
        (
            {"node": {"confServer": "ctl corp:6817"}},
            "coreburst:burst.node.confServer: 'ctl corp:6817' is not a Slurm conf server",
        ),
        (
            {"node": {"confServer": "ctl.corp:99999"}},
            "coreburst:burst.node.confServer: 'ctl.corp:99999' names port 99999: a TCP port is "
            "1-65535 (e.g. 6817)",
        ),
        ({"node": {"confMode": "file"}}, "confMode file needs slurmConfParameterArn"),
        (
            {"node": {"confServer": "c:6817", "mungeKeySecretArn": "arn:aws:s3:::bucket"}},
            "is not a secretsmanager secret ARN",
        ),
        ({"node": {"confServer": "c", "tagWaitSeconds": 1}}, "tagWaitSeconds"),
    ],
)
def test_bad_join_settings_are_one_line_errors(
    dev_config: dict[str, Any], burst: dict[str, Any], message: str
) -> None:
    dev_config["coreburst:burst"] = burst
    with pytest.raises(StackConfigError) as err:
        evaluate_config("dev", dev_config)
    assert message in str(err.value) and "\n" not in str(err.value)


# -- the join block, run ----------------------------------------------------------------------


def _fakes(tmp: Path, tools_present: bool) -> Path:
    bin_dir = tmp / "fakebin"
    bin_dir.mkdir()
    tools = {
        "curl": FAKE_CURL,
        "aws": FAKE_AWS,
        "systemctl": RECORDER,
        "chown": RECORDER,
        "apt-get": FAKE_APT,
        "apt-get.recorder": RECORDER,
        "scontrol": RECORDER,
    }
    for tool, probe in PROBES.items():
        tools[tool] = FAKE_PROBE.replace("$FAKE_PROBE_NAME", probe)
    if tools_present:
        tools |= {"slurmd": RECORDER, "munged": RECORDER}
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run_join(
    tmp: Path,
    *,
    node: str = "dev-p5-2",
    param: str = CONF_SERVER,
    deny: str = "",
    conf_mode: str = "configless",
    wait: int = 30,
    tools_present: bool = True,
    install: bool = True,
    key: bytes = MUNGE_KEY,
    check: str = "pass",  # pass (p5-healthy) | fail (7 of 8 GPUs) | off (no gate)
) -> tuple[subprocess.CompletedProcess[str], Path, list[str]]:
    root = tmp / "root"
    root.mkdir()
    fake_dir = tmp / "fake"
    fake_dir.mkdir()
    (fake_dir / "secret.b64").write_text(base64.b64encode(key).decode() + "\n")
    join = SlurmJoin(
        region=REGION,
        munge_key_secret_arn=SECRET_ARN,
        slurm_conf_parameter_arn=PARAM_ARN,
        conf_mode=conf_mode,  # type: ignore[arg-type]
        tag_wait_seconds=wait,
        poll_seconds=0.05,
        gres_line="Name=gpu Type=h100 File=/dev/nvidia[0-7]",
        install_packages=install,
        health_gate=check != "off",
        gate_expect=(("p5.48xlarge", 8, 32),),
        root=str(root),
    )
    block = "\n".join(render_slurm_join(join))
    log = tmp / "calls.log"
    health = HEALTH / "p5-healthy"
    if check == "fail":
        health = tmp / "health"
        health.mkdir()
        for f in (HEALTH / "p5-healthy").iterdir():
            (health / f.name).write_bytes(f.read_bytes())
        (health / "nvidia-smi.out").write_bytes((HEALTH / "bad/nvidia-smi-7-gpus.out").read_bytes())
    env = {
        **os.environ,
        # Coreutils from /usr/bin and /bin only: this machine's own slurmd (/usr/sbin) must not
        # stand in for the image's.
        "PATH": f"{_fakes(tmp, tools_present)}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "FAKE_HEALTH": str(health),
        "TMPDIR": str(tmp),
        "FAKE_LOG": str(log),
        "FAKE_DIR": str(fake_dir),
        "FAKE_TOKEN": TOKEN,
        "FAKE_IID": INSTANCE_ID,
        "FAKE_TAG_KEY": "coreburst-slurm-node",
        "FAKE_NODE": node,
        "FAKE_PARAM": param,
        "FAKE_DENY": deny,
    }
    proc = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + block],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, root, calls


def _no_key_in(text: str) -> None:
    b64 = base64.b64encode(MUNGE_KEY).decode()
    assert b64 not in text and b64[:24] not in text
    assert MUNGE_KEY.decode("latin-1")[:32] not in text


def test_join_reads_tag_key_and_conf_then_starts_slurmd(tmp_path: Path) -> None:
    proc, root, calls = _run_join(tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The node name is the instance's tag, read after it appeared (third poll).
    assert (root / "etc/default/slurmd").read_text() == (
        f'SLURMD_OPTIONS="-N dev-p5-2 --conf-server {CONF_SERVER}"\n'
    )
    assert (root / "etc/coreburst/slurm-node-name").read_text() == "dev-p5-2\n"
    drop_in = root / "etc/systemd/system/slurmd.service.d/coreburst-configless.conf"
    assert drop_in.read_text() == "[Unit]\nConditionPathExists=\n"
    assert (tmp_path / "fake/polls").read_text().strip() == "3"
    assert f"instance {INSTANCE_ID} is Slurm node dev-p5-2" in proc.stdout
    # The key: exact bytes, mode 0400, owned by munge, in a 0700 directory, never logged.
    key = root / "etc/munge/munge.key"
    assert key.read_bytes() == MUNGE_KEY
    assert stat.S_IMODE(key.stat().st_mode) == 0o400
    assert stat.S_IMODE((root / "etc/munge").stat().st_mode) == 0o700
    assert f"chown munge:munge {root}/etc/munge {key}.new" in calls
    _no_key_in(proc.stdout + proc.stderr + "\n".join(calls))
    assert not list(tmp_path.glob("coreburst-munge.*")), "the base64 copy is removed"
    # IMDSv2: the token first, by PUT; every read carries it.
    curls = [c for c in calls if c.startswith("curl ")]
    assert "-X PUT http://169.254.169.254/latest/api/token" in curls[0]
    assert all(f"X-aws-ec2-metadata-token: {TOKEN}" in c for c in curls[1:])
    # The AWS calls, by ARN, in the region.
    assert (
        f"aws secretsmanager get-secret-value --region {REGION} --secret-id {SECRET_ARN} "
        "--query SecretBinary --output text"
    ) in calls
    assert (
        f"aws ssm get-parameter --region {REGION} --name {PARAM_ARN} --with-decryption "
        "--query Parameter.Value --output text"
    ) in calls
    services = [c.split(" -", 1)[0] for c in calls if not c.startswith(("curl", "aws", "ch"))]
    assert services == [
        # Configless: a drop-in lifts Debian's ConditionPathExists=/etc/slurm/slurm.conf.
        "systemctl daemon-reload",
        "systemctl restart munge",
        # The health gate runs before slurmd may register: GPUs and EFA (DCGM off by default).
        "nvidia-smi",
        "fi_info",
        "systemctl enable slurmd",
        "systemctl restart slurmd",
    ]
    assert "node-gate dev-p5-2: passed" in proc.stdout
    assert "  ok   efa: 32 EFA devices" in proc.stdout
    assert not [c for c in calls if c.startswith("apt-get")]  # slurmd and munged are present


def test_a_node_failing_the_health_gate_never_starts_slurmd(tmp_path: Path) -> None:
    proc, _, calls = _run_join(tmp_path, check="fail")
    assert proc.returncode == 1
    assert "  FAIL gpus: 7 GPUs, p5.48xlarge has 8" in proc.stdout
    assert "health check failed on dev-p5-2 (p5.48xlarge)" in proc.stderr
    assert "slurmd not started" in proc.stderr
    assert not [c for c in calls if "slurmd" in c and c.startswith("systemctl")]
    # slurmctld is told: DOWN with the reason (the job requeues), then powered down.
    assert [c for c in calls if c.startswith("scontrol")] == [
        "scontrol update nodename=dev-p5-2 state=down reason=coreburst: health check failed: "
        "gpus: 7 GPUs, p5.48xlarge has 8",
        "scontrol update nodename=dev-p5-2 state=power_down_force",
    ]


def test_the_gate_can_be_turned_off(tmp_path: Path) -> None:
    proc, _, calls = _run_join(tmp_path, check="off")
    assert proc.returncode == 0, proc.stderr
    assert not [c for c in calls if c.startswith(("nvidia-smi", "fi_info", "scontrol"))]
    assert "systemctl restart slurmd" in calls


def test_file_mode_writes_slurm_conf_and_the_nodes_gres(tmp_path: Path) -> None:
    conf = "ClusterName=core\nSlurmctldHost=slurmctl(10.10.0.5)\nInclude burst.conf"
    proc, root, _ = _run_join(tmp_path, conf_mode="file", param=conf, node="p5-7")
    assert proc.returncode == 0, proc.stderr
    assert (root / "etc/slurm/slurm.conf").read_text() == conf + "\n"
    assert (root / "etc/slurm/gres.conf").read_text() == (
        "NodeName=p5-7 Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"
    )
    assert (root / "etc/default/slurmd").read_text() == 'SLURMD_OPTIONS="-N p5-7"\n'
    assert not (root / "etc/systemd/system/slurmd.service.d").exists()  # slurm.conf is there


def test_missing_slurm_is_installed_with_apt(tmp_path: Path) -> None:
    proc, _, calls = _run_join(tmp_path, tools_present=False)
    assert proc.returncode == 0, proc.stderr
    assert "apt-get install -y --no-install-recommends slurmd munge slurm-client" in calls


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"tools_present": False, "install": False}, "slurmd is not installed"),
        ({"deny": "secret"}, f"cannot read the munge key (GetSecretValue on {SECRET_ARN})"),
        ({"deny": "parameter"}, f"cannot read the Slurm parameter (GetParameter on {PARAM_ARN})"),
        ({"node": "", "wait": 1}, f"no coreburst-slurm-node tag on {INSTANCE_ID} after 1 s"),
        ({"node": "bad;name"}, "tag coreburst-slurm-node is not a Slurm node name"),
        ({"key": MUNGE_KEY[:16]}, "the munge key is 16 bytes; munged needs at least 32"),
        ({"param": "ctl:6817 -N evil"}, "is not a conf server"),
    ],
)
def test_a_missing_piece_fails_loudly_and_slurmd_never_starts(
    tmp_path: Path, kwargs: dict[str, Any], reason: str
) -> None:
    proc, root, calls = _run_join(tmp_path, **kwargs)
    assert proc.returncode == 1
    last = proc.stderr.splitlines()[-1]  # after whatever the failing tool said
    assert last.startswith("coreburst: Slurm join failed: ") and reason in last
    assert "this node does not register" in proc.stderr
    assert not [c for c in calls if c.startswith("systemctl")]
    assert not (root / "etc/default/slurmd").exists()
    _no_key_in(proc.stdout + proc.stderr)


# -- IAM --------------------------------------------------------------------------------------


def _cli_operations(block: str) -> set[tuple[str, str]]:
    """(botocore service, operation) for every `aws <service> <command>` the block runs (the
    lines or command substitutions that start with it; messages that quote a command for the
    operator are not calls)."""
    session = botocore.session.get_session()
    out = set()
    for service, command in re.findall(r"(?:^\s*|\$\()aws ([a-z0-9-]+) ([a-z0-9-]+)", block, re.M):
        model = session.get_service_model(service)
        by_cli = {botocore.xform_name(op, "-"): op for op in model.operation_names}
        assert command in by_cli, f"aws {service} {command}: no such operation in botocore"
        out.add((service, by_cli[command]))
    return out


def test_granted_actions_are_exactly_the_operations_the_block_calls(
    dev_config: dict[str, Any],
) -> None:
    """The role gets one action per AWS call of the join block, each an operation in botocore's
    service model (its IAM prefix is the model's signingName), on that one resource."""
    session = botocore.session.get_session()
    ev = evaluate_config("dev", _burst(dev_config))
    block = _script(ev, "dev-p5")
    ops = _cli_operations(block)
    assert ops == {("secretsmanager", "GetSecretValue"), ("ssm", "GetParameter")}
    needed = {f"{session.get_service_model(s).signing_name}:{op}" for s, op in ops}
    policy = json.loads(ev.named("dev-p5-node-slurm-join").inputs["policy"])
    granted = {s["Action"] for s in policy["Statement"]}
    assert granted == needed
    assert all(s["Resource"] != "*" and "*" not in s["Resource"] for s in policy["Statement"])
    # No ec2:DescribeTags: the node name comes from instance metadata tags.
    assert "ec2" not in {a.split(":")[0] for a in granted}


class _RealArnMocks(_Mocks):
    """ARNs in the formats of the Service Authorization Reference ("Resource types defined by
    AWS Secrets Manager": secret:<name>-<6 chars>; "... by AWS Systems Manager":
    parameter/<name>; IAM role/<name>), so parliament checks resource types. Made up by us."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        rid, state = super().new_resource(args)
        name = args.inputs.get("name") or args.name
        fmt = {
            "aws:secretsmanager/secret:Secret": "arn:aws:secretsmanager:{r}:{a}:secret:{n}-AbCdEf",
            "aws:ssm/parameter:Parameter": "arn:aws:ssm:{r}:{a}:parameter{n}",
            "aws:iam/role:Role": "arn:aws:iam::{a}:role/{n}",
        }.get(args.typ)
        if fmt:
            state["arn"] = fmt.format(r=self.region, a=FAKE_ACCOUNT, n=name)
        return rid, state


def test_node_policies_pass_parliament(
    dev_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """parliament (https://github.com/duo-labs/parliament), community auditors on: the join
    policy names real actions on resources of the right type, with no finding at all."""
    from parliament import analyze_policy_string

    import infra.offline

    monkeypatch.setattr(infra.offline, "_Mocks", _RealArnMocks)
    ev = evaluate_config("dev", _burst(dev_config))
    doc = ev.named("dev-p5-node-slurm-join").inputs["policy"]
    assert ":parameter/coreburst/dev/slurm/conf-server" in doc
    findings = analyze_policy_string(doc, include_community_auditors=True).findings
    assert [(f.issue, f.detail) for f in findings] == []
    # The lint is live: the same grant on the wrong resource type is a finding.
    wrong = doc.replace(":ssm:", ":sqs:")
    assert analyze_policy_string(wrong).findings


def test_policy_pack_accepts_a_burst_stack(dev_config: dict[str, Any]) -> None:
    from policies.runner import run_policies
    from policies.sources import from_offline

    ev = evaluate_config("dev", _burst(dev_config))
    assert run_policies(from_offline(ev.resources, "dev")) == []


def test_real_munged_accepts_the_key_the_block_wrote(tmp_path: Path) -> None:
    """The written key, given to the machine's own munged (Debian's munge, which CI installs):
    a credential it encodes, unmunge decodes (munge(1), unmunge(1)). munged also refuses keys
    under 32 bytes ("Keyfile must be at least 32 bytes"), which the block checks first."""
    import shutil
    import time

    munged = shutil.which("munged") or "/usr/sbin/munged"
    if not (Path(munged).exists() and shutil.which("munge") and shutil.which("unmunge")):
        pytest.fail("munged, munge and unmunge are needed: apt-get install munge")
    proc, root, _ = _run_join(tmp_path)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "munge-run"
    run.mkdir(mode=0o700)
    sock = run / "sock"
    daemon = subprocess.Popen(
        [
            munged,
            "-F",
            "-f",
            f"--key-file={root}/etc/munge/munge.key",
            f"--socket={sock}",
            f"--log-file={run}/log",
            f"--pid-file={run}/pid",
            f"--seed-file={run}/seed",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            assert time.monotonic() < deadline, "munged did not open its socket"
            time.sleep(0.05)
        cred = subprocess.run(
            ["munge", "-n", "-S", str(sock)], capture_output=True, text=True, check=True
        ).stdout
        out = subprocess.run(
            ["unmunge", "-S", str(sock)], input=cred, capture_output=True, text=True, check=True
        ).stdout
        assert "STATUS:          Success (0)" in out
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


# -- a node that can boot: what plan refuses, what fits ---------------------------------------


@pytest.mark.parametrize(
    ("node", "cluster", "message"),
    [
        (
            {},
            {"instanceType": "trn2.48xlarge"},
            "burst.node.healthGate: clusters[0] (trn2.48xlarge) has Trainium2 (neuron) "
            "accelerators and the gate checks NVIDIA GPUs only",
        ),
        (
            {"installPackages": False},
            {},
            "burst.node.installPackages: false, but clusters[0] boots the default image (Deep "
            "Learning Base AMI), which has no slurmd or munge",
        ),
        (
            {"healthGateDcgm": True},
            {},
            "burst.node.healthGateDcgm: clusters[0] boots the default image, whose DCGM 4",
        ),
        (
            # EC2 would refuse the launch: user data over 16 KB (test_user_data_fits_ec2s_16_kb)
            {"healthGate": False},
            {"instanceType": "trn2.48xlarge"},
            "bytes; EC2 takes at most 16384 (before base64); a Neuron burst node's publisher and "
            "Slurm join do not fit together yet",
        ),
        (
            {"healthGateDcgm": True, "healthGate": False},
            {"amiSsmParameter": "/site/ami/gpu-dcgm3"},
            "burst.node.healthGateDcgm: true needs healthGate: true",
        ),
    ],
)
def test_plan_refuses_a_node_that_cannot_boot(
    dev_config: dict[str, Any], node: dict[str, Any], cluster: dict[str, Any], message: str
) -> None:
    cfg = _burst(dev_config, **node)
    cfg["coreburst:clusters"][0].update(cluster)
    with pytest.raises(StackConfigError) as err:
        evaluate_config("dev", cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_plan_says_so_in_one_line_and_exits_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from coreburst.cli import app

    text = (REPO / "Pulumi.burst.yaml").read_text()
    (tmp_path / "Pulumi.burst.yaml").write_text(
        text.replace("confServer: slurmctld", "installPackages: false\n      confServer: slurmctld")
    )
    res = CliRunner().invoke(app, ["plan", "--stack", "burst", "--stack-dir", str(tmp_path)])
    assert res.exit_code == 2
    assert "burst.node.installPackages: false, but clusters[0] boots the default image" in (
        res.stderr
    )
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def _join_block(config: dict[str, Any], cluster: str = "dev-p5") -> str:
    """The join block GpuCluster would render for ``cluster`` (without Pulumi: the program's
    own rendering is held to this by test_the_chroot_tests_user_data_is_the_programs)."""
    from coreburst.common.catalog import load_catalog
    from infra.config import parse_stack_config
    from infra.userdata import slurm_join_for

    raw = {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("coreburst:")}
    catalog = load_catalog()
    cfg = parse_stack_config({**raw, "region": config["aws:region"]}, catalog)
    assert cfg.burst is not None and cfg.burst.node is not None
    c = next(c for c in cfg.clusters if c.name == cluster)
    join = slurm_join_for(
        cfg.burst.node,
        c,
        catalog,
        region=cfg.region,
        node_tag_key=cfg.burst.node_tag_key,
        munge_key_secret_arn=SECRET_ARN,
        slurm_conf_parameter_arn=PARAM_ARN,
    )
    return "\n".join(render_slurm_join(join))


def test_what_an_image_of_ones_own_may_turn_off_or_on(dev_config: dict[str, Any]) -> None:
    cfg = _burst(dev_config, installPackages=False, healthGateDcgm=True)
    cfg["coreburst:clusters"][0]["amiSsmParameter"] = "/site/ami/gpu-slurm-dcgm3"
    block = _join_block(cfg)
    assert "apt-get" not in block and "--expect=p5.48xlarge=8:32 \\" in block
    assert "--no-dcgm" not in block
    block = _join_block(_burst(dev_config, healthGate=False))
    assert "node-gate" not in block and "systemctl restart slurmd" in block


def test_the_gate_expects_each_type_the_cluster_launches(dev_config: dict[str, Any]) -> None:
    cfg = _burst(dev_config)
    cfg["coreburst:clusters"][0].update(fallbackInstanceTypes=["p5e.48xlarge"])
    block = _join_block(cfg)
    assert "--expect=p5.48xlarge=8:32 --expect=p5e.48xlarge=8:32 --no-dcgm" in block
    cfg["coreburst:clusters"][0].update(efa=False, fallbackInstanceTypes=[])
    block = _join_block(cfg)
    assert "--expect=p5.48xlarge=8:0 --no-dcgm" in block  # no EFA interface, no EFA probe


@pytest.fixture(scope="module")
def burst() -> Evaluation:
    """The example burst stack (Pulumi.burst.yaml) under mocks."""
    from infra.offline import evaluate_stack

    return evaluate_stack("burst")


def test_user_data_fits_ec2s_16_kb(
    dev: Evaluation, prod: Evaluation, burst: Evaluation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EC2 user guide, "Run commands when you launch an EC2 instance with user data input"
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html): "User data is
    limited to 16 KB, in raw form, before it is base64-encoded"."""
    import infra.userdata

    sizes = {}
    for ev in (dev, prod, burst):
        for lt in ev.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
            sizes[lt.name] = len(base64.b64decode(lt.inputs["userData"]))
    assert max(sizes.values()) <= 16 * 1024, sizes
    assert sizes["od-lt"] > 10_000  # the gate is in it (about 6 KB of it)
    monkeypatch.setattr(infra.userdata, "USER_DATA_MAX_BYTES", 8 * 1024)
    with pytest.raises(ValueError, match=r"user data is \d+ bytes; EC2 takes at most 8192"):
        burst_user_data(REPO / "Pulumi.burst.yaml", "od", SECRET_ARN, PARAM_ARN)


def test_the_chroot_tests_user_data_is_the_programs(burst: Evaluation) -> None:
    """tests/integration/burst/test_node_boot.py renders without Pulumi (the Slurm chroots have
    none): what it runs is byte for byte what the launch template carries."""
    ev = burst
    secret, param = ev.outputs["slurmMungeKeySecretArn"], ev.outputs["slurmConfParameterArn"]
    for cluster in ("od", "sp"):
        assert _script(ev, cluster) == burst_user_data(
            REPO / "Pulumi.burst.yaml", cluster, secret, param
        )
