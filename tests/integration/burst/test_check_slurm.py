"""``coreburst burst check --skip aws`` against the real Slurm of the burst lab
(coreburst/sandbox/slurmlab.py): the lab's stack has a Capacity Block pool whose hold
reservation nobody made yet (✘, with the fix), and once it exists every Slurm check is ✔."""

from __future__ import annotations

from coreburst.sandbox.slurmlab import BurstLab


def test_the_slurm_side_of_the_lab(burst_lab: BurstLab) -> None:
    lab = burst_lab.slurm
    args = ("check", "--stack", "lab", "--stack-dir", str(lab.lab), "--skip", "aws")
    r = lab.burst_cli(*args, "--slurm-conf", str(lab.conf))
    assert r.returncode == 1, r.stdout + r.stderr
    assert [line for line in r.stdout.splitlines() if line.startswith("✘")] == [
        "✘ slurm-reservation coreburst-hold-cb: missing: the Capacity Block's nodes may be "
        "powered up outside the block (scontrol -o show reservation); fix: run reservations.sh "
        "from `coreburst burst slurm-conf --out` on the controller"
    ]
    assert f"✔ slurm-fragment  {lab.conf}: the stack's programs are slurmctld's" in r.stdout
    assert (
        f"✔ slurm-program   ResumeProgram {lab.lab}/etc/coreburst-burst-resume: executable"
        in r.stdout
    )
    lab.run(
        "scontrol", "create", "reservation", "ReservationName=coreburst-hold-cb", "Nodes=cb-1",
        "Users=root", "Flags=MAINT,IGNORE_JOBS", "StartTime=now", "Duration=UNLIMITED",
    )  # fmt: skip
    try:
        r = lab.burst_cli(*args, "--slurm-conf", str(lab.conf))
        assert r.returncode == 0, r.stdout + r.stderr
        body = r.stdout.splitlines()[:-1]
        assert len(body) == 6 and all(line.startswith("✔ ") for line in body), r.stdout
    finally:
        lab.run("scontrol", "delete", "reservation", "coreburst-hold-cb", check=False)
