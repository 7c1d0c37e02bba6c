"""Slurm's accounting database for the lab: MariaDB and slurmdbd on 127.0.0.1.

MariaDB gets its own data directory under ``root`` (``mariadb-install-db``), a socket there and
a TCP port on 127.0.0.1 only; one user for slurmdbd with a random password that lives only in
``slurmdbd.conf`` (mode 0600, as slurmdbd.conf(5) requires). slurmdbd runs with
``AuthType=auth/munge`` on the lab's own munged, so it must start after the lab's munged and
before its slurmctld: :class:`coreburst.sandbox.slurmlab.SlurmLab` takes this object as
``accounting=`` and calls :meth:`SlurmDB.start_dbd` at that point, and renders
``slurm.conf`` with :meth:`SlurmDB.slurm_conf` (``AccountingStorageType=
accounting_storage/slurmdbd``, ``AccountingStorageTRES=gres/gpu`` so each job's GPUs are in
its TRES).

MariaDB is started once (per test module) and outlives one lab; ``slurmdbd.conf`` sits beside
the lab's ``slurm.conf`` (slurmdbd.conf(5): "in the same directory as the slurm.conf").

Needs root and Debian's ``mariadb-server slurmdbd``.

    >>> db = SlurmDB(Path("/tmp/acct")).start()       # doctest: +SKIP
    >>> lab = SlurmLab(Path("/tmp/lab"), {}, accounting=db).start()   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from coreburst.sandbox.emulator import free_ports
from coreburst.sandbox.slurmlab import wait_until

BINARIES = ("mariadb-install-db", "mariadbd", "slurmdbd", "sacct", "sacctmgr")
DEBIAN_PACKAGES = "mariadb-server slurmdbd"
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"

# slurmdbd.conf(5). Made for the lab: PurgeJobAfter is not set, so nothing is purged.
SLURMDBD_CONF = """\
AuthType=auth/munge
AuthInfo=socket={munge_socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={root}/slurmdbd.pid
LogFile={root}/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser={user}
StoragePass={password}
StorageLoc={db}
"""

# slurm.conf(5): accounting through slurmdbd, job accounting gathered per process (no cgroups
# in the lab), GPU GRES accounted as a TRES (gres/gpu is not tracked unless listed);
# AccountingStoragePass names the lab's munged socket ("If using SlurmDBD with a second MUNGE
# daemon"): without it slurmctld, sacct and sacctmgr use the system's default socket.
SLURM_CONF_LINES = """\
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStorageTRES=gres/gpu
AccountingStoragePass={munge_socket}
"""


def missing_prerequisite() -> str | None:
    """Why this machine cannot run MariaDB and slurmdbd for the lab, or None."""
    if os.geteuid() != 0:
        return "slurmdbd for the lab needs root"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"binaries missing ({', '.join(missing)}): apt-get install -y {DEBIAN_PACKAGES}"
    return None


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _stop_pid(pidfile: Path, timeout_s: float = 15) -> None:
    """SIGTERM the process in ``pidfile``, SIGKILL after ``timeout_s`` (bounded)."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)


class SlurmDB:
    """MariaDB (started by :meth:`start`) and slurmdbd (started by the lab, :meth:`start_dbd`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.db_port, self.dbd_port = free_ports(2)
        self._password = secrets.token_hex(16)
        self._procs: list[subprocess.Popen[bytes]] = []
        self.dbd_pidfile = root / "slurmdbd.pid"

    # -- MariaDB ------------------------------------------------------------------------
    def start(self) -> SlurmDB:
        data = self.root / "mysql"
        self.root.mkdir(parents=True, exist_ok=True)
        if not data.exists():
            done = subprocess.run(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    f"--datadir={data}",
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                capture_output=True,
                timeout=120,
                check=False,
            )
            if done.returncode:
                said = (done.stderr or done.stdout).decode(errors="replace").strip()
                raise RuntimeError(f"mariadb-install-db exited {done.returncode}: {said[-1500:]}")
        init = self.root / "init.sql"
        init.write_text(
            f"CREATE DATABASE IF NOT EXISTS {DB_NAME};\n"
            f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' "
            f"IDENTIFIED BY '{self._password}';\n"
            f"ALTER USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{self._password}';\n"
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';\n"
        )
        init.chmod(0o600)
        log = (self.root / "mariadbd.out").open("wb")
        self._procs.append(
            subprocess.Popen(
                [
                    "mariadbd",
                    "--no-defaults",
                    f"--datadir={data}",
                    f"--socket={self.root}/mysqld.sock",
                    f"--port={self.db_port}",
                    "--bind-address=127.0.0.1",
                    "--skip-name-resolve",
                    "--user=root",
                    f"--pid-file={self.root}/mariadbd.pid",
                    f"--log-error={self.root}/mariadbd.log",
                    f"--init-file={init}",
                    "--innodb-buffer-pool-size=128M",
                    # slurmdbd's own advice (slurmdbd logs it at start): a lock wait above
                    # 900 s, a log file of at least 64M.
                    "--innodb-lock-wait-timeout=900",
                    "--innodb-log-file-size=64M",
                    "--skip-log-bin",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        try:
            wait_until(
                "MariaDB", lambda: self._procs[0].poll() is None and _listening(self.db_port), 60
            )
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"MariaDB did not start: {self.log_tail('mariadbd.log')}") from None
        return self

    # -- slurmdbd ----------------------------------------------------------------------------
    def slurm_conf(self, munge_dir: Path) -> str:
        """The accounting lines of the lab's slurm.conf (its munged socket in ``munge_dir``)."""
        return SLURM_CONF_LINES.format(
            dbd_port=self.dbd_port, munge_socket=munge_dir / "munge.socket"
        )

    def start_dbd(self, lab: Any) -> None:
        """Start slurmdbd on the lab's munged (``lab``: a SlurmLab, its munged running)."""
        conf = lab.conf.parent / "slurmdbd.conf"
        conf.write_text(
            SLURMDBD_CONF.format(
                munge_socket=lab.lab / "munge" / "munge.socket",
                dbd_port=self.dbd_port,
                root=self.root,
                db_port=self.db_port,
                user=DB_USER,
                password=self._password,
                db=DB_NAME,
            )
        )
        conf.chmod(0o600)
        _stop_pid(self.dbd_pidfile)  # one slurmdbd per lab
        subprocess.run(["slurmdbd"], env=lab.env, capture_output=True, check=True, timeout=30)
        try:
            wait_until("slurmdbd", lambda: _listening(self.dbd_port), 60)
        except TimeoutError:
            raise RuntimeError(f"slurmdbd did not start: {self.log_tail('slurmdbd.log')}") from None

    def stop_dbd(self) -> None:
        _stop_pid(self.dbd_pidfile)

    def stop(self) -> None:
        """slurmdbd, then MariaDB (each bounded, then SIGKILL)."""
        self.stop_dbd()
        for p in self._procs:  # our child: wait() it (a pid check would see its zombie)
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=10)
        self._procs.clear()
        (self.root / "mariadbd.pid").unlink(missing_ok=True)

    def sql(self, statement: str, timeout_s: float = 30) -> str:
        """Run SQL on slurmdbd's database as MariaDB's root (its socket under ``root``); the
        rows, tab-separated. For tests that move recorded history (no other use)."""
        client = shutil.which("mariadb") or "mysql"
        done = subprocess.run(
            [client, "--no-defaults", f"--socket={self.root}/mysqld.sock", "-uroot", "-N", "-B",
             DB_NAME, "-e", statement],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"SQL failed: {done.stderr.strip()[-300:]}")
        return done.stdout

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join((self.root / name).read_text().splitlines()[-lines:])
        except OSError:
            return f"({name}: none)"
