"""The merge rules of burst.conf against a site's slurm.conf (coreburst/burst/merge.py): every
key the fragment sets has a rule, a ``# merge:`` comment above it and a row in docs/burst.md;
the site's comma lists are carried; each override or clash is one warning line.

The site slurm.conf lines are made up here, in slurm.conf(5) syntax. The rule itself (the last
value of a key wins) is Slurm's parser: ``_handle_common`` in src/common/parse_config.c frees
the earlier value ("specified more than once, latest value used")."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from coreburst.burst.cli import app
from coreburst.burst.config import BurstStack, parse_burst
from coreburst.burst.merge import RULES, conflicts, merge_list, parse_conf
from coreburst.burst.slurmconf import render_slurm_include
from tests.helpers.burst import CLUSTERS, stack_map

ROOT = Path(__file__).resolve().parents[3]
SITE = """\
ClusterName=core
SuspendTime=300   # the site's own
suspendrate=10
TreeWidth=65533
CommunicationParameters=block_null_hash
SlurmctldParameters=enable_configless,power_save_interval=60
NodeName=DEFAULT Sockets=2 Weight=5 Procs=64 Feature=core
NodeName=dgx[01-04],od-2 CPUs=224
PartitionName=DEFAULT MaxTime=1-00:00:00 OverSubscribe=NO
PartitionName=spot Nodes=dgx01
Include burst.conf
ResumeTimeout=60
"""


def _stack(**burst: object) -> BurstStack:
    return parse_burst("t", stack_map(CLUSTERS, {"coreNodes": "dgx[01-04]", **burst}))


def _keys(text: str) -> list[str]:
    return [ln.split("=", 1)[0] for ln in text.splitlines() if re.match(r"^[A-Za-z]+=", ln)]


def test_every_key_the_fragment_sets_has_a_rule_and_a_merge_comment_above_it() -> None:
    text = render_slurm_include(_stack(node={"confServer": "ctl:6817"}), slurm_release=(22, 5))
    keys = list(dict.fromkeys(_keys(text)))
    assert keys == list(RULES)  # all of them, in the order RULES lists them
    lines = text.splitlines()
    for i, line in enumerate(lines):
        key = line.split("=", 1)[0]
        if key in RULES and key not in ("NodeName", "PartitionName"):
            assert lines[i - 1] == f"# merge: {RULES[key].comment}" + (
                "; render with the site's slurm.conf (--site-conf) to carry its entries"
                if RULES[key].kind == "list"
                else ""
            ), line
    for kind in ("NodeName", "PartitionName"):
        first = next(i for i, ln in enumerate(lines) if ln.startswith(f"{kind}="))
        assert f"# merge: {RULES[kind].comment}" in lines[first - 2 : first]


def test_docs_table_has_one_row_per_rule() -> None:
    docs = (ROOT / "docs" / "burst.md").read_text(encoding="utf-8")
    table = docs.split("## Merging with the site's slurm.conf", 1)[1].split("\n## ", 1)[0]
    rows = [m.group(1).split(" (")[0] for m in re.finditer(r"(?m)^\| ([A-Za-z]+[^|]*?) \|", table)]
    assert rows[1:] == list(RULES)  # after the header row


def test_site_lists_are_carried_and_ours_win_on_the_same_entry() -> None:
    site = parse_conf(SITE)
    text = render_slurm_include(_stack(), slurm_release=(22, 5), site=site)
    assert "\nCommunicationParameters=block_null_hash,NoAddrCache\n" in text
    assert (
        "\nSlurmctldParameters=enable_configless,idle_on_node_suspend,power_save_interval=10,"
        "power_save_min_interval=0\n"
    ) in text
    assert "\nPrivateData=cloud\n" in text  # the site sets none
    assert (
        "# merge: replaces the site's whole SlurmctldParameters list (the last value wins); "
        "it carries the entries of slurm.conf:6\n"
    ) in text
    assert merge_list("a,b=1", parse_conf("X=b=2,c"), "X") == "c,a,b=1"


def test_each_override_and_clash_is_one_warning_naming_the_sites_line() -> None:
    site = parse_conf(SITE)
    text = render_slurm_include(_stack(), slurm_release=(22, 5), site=site)
    got = conflicts(text, site)
    assert all("\n" not in w for w in got)
    want = [
        "slurm.conf:2: SuspendTime=300 is replaced by burst.conf's SuspendTime=600 (the last "
        "value wins): set coreburst:burst.suspendTime in the stack, not in slurm.conf",
        "slurm.conf:3: SuspendRate=10 is replaced by burst.conf's SuspendRate=0",
        "slurm.conf:12: ResumeTimeout=60 comes after the Include of burst.conf, so it replaces "
        "burst.conf's ResumeTimeout=1800",
        "slurm.conf:5: CommunicationParameters=block_null_hash is replaced by burst.conf's "
        "CommunicationParameters=block_null_hash,NoAddrCache, which carries its entries",
        "slurm.conf:6: SlurmctldParameters=enable_configless,power_save_interval=60 is replaced "
        "by burst.conf's SlurmctldParameters=enable_configless,idle_on_node_suspend,"
        "power_save_interval=10,power_save_min_interval=0, which sets power_save_interval=60 "
        "its own way",
        "slurm.conf:7: NodeName=DEFAULT sets sockets, weight for the burst nodes too",
        "slurm.conf:8: NodeName=dgx[01-04],od-2 defines the burst node od-2 again: slurmctld "
        "will not start",
        "slurm.conf:9: PartitionName=DEFAULT sets oversubscribe for the burst partitions too",
        "slurm.conf:10: PartitionName=spot defines the burst partition spot again",
    ]
    for w in want:
        assert sum(w in g for g in got) == 1, (w, got)
    assert len(got) == len(want)  # TreeWidth: the same value, nothing lost; no other line


def test_slurm_conf_site_conf_prints_one_stderr_line_per_override(tmp_path: Path) -> None:
    from tests.helpers.burst import write_stack

    write_stack(tmp_path, "t", stack_map(CLUSTERS, {"coreNodes": "dgx[01-04]"}))
    conf = tmp_path / "slurm.conf"
    conf.write_text("SuspendTime=300\nInclude site-extra.conf\n")
    (tmp_path / "site-extra.conf").write_text("SlurmctldParameters=reboot_from_controller\n")
    out = CliRunner().invoke(
        app,
        ["slurm-conf", "-s", "t", "--stack-dir", str(tmp_path), "--site-conf", str(conf),
         "--slurm-release", "24.11", "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == (
        f"wrote {tmp_path}/out: burst.conf, gres-burst.conf, reservations.sh and 3 programs"
    )
    warnings = out.stderr.splitlines()
    assert [w.split(":")[1] for w in warnings] == [" slurm.conf", " site-extra.conf"], warnings
    assert all(w.startswith("warning: ") for w in warnings)
    text = (tmp_path / "out" / "burst.conf").read_text()
    assert "\nSlurmctldParameters=reboot_from_controller,idle_on_node_suspend," in text
    missing = CliRunner().invoke(
        app, ["slurm-conf", "-s", "t", "--stack-dir", str(tmp_path), "--site-conf", "/nope"]
    )
    assert missing.exit_code == 2 and missing.output.startswith("error: --site-conf /nope")
