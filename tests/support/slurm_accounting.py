"""Two real Slurm clusters that share one accounting database, as sites with several clusters run them: a job
sent with ``sbatch -M away`` from ``home``'s login node runs on ``away``, and only commands given ``-M away``
find it.

Debian's ``slurmdbd`` 22.05 (``accounting_storage/mysql``) on a MariaDB of its own: ``mariadb-install-db`` into a
temporary folder (~2.5 s), ``mariadbd`` on a free port of 127.0.0.1 (up in ~0.3 s), then ``slurmdbd``, both
clusters registered with ``sacctmgr`` (~3 s) and each cluster's ``slurmctld`` and two ``slurmd``
(:func:`tests.support.slurm_cluster.start_cluster`, sharing this rig's ``munged``: one key for all). About 10 s
in all here. Slurm's clients reach slurmdbd through munge's socket named by ``AccountingStoragePass`` (``AuthInfo``
alone is not used for that connection). Every daemon is a child of the test process, stopped by pid, and guarded
by the test process's watchdog (``watchdog.py``) until then.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import watchdog
from tests.support.ports import free_ports
from tests.support.slurm_cluster import (
    SlurmCluster,
    SlurmUnavailable,
    _die_with_parent,
    _wait_for,
    start_cluster,
    unavailable_reason,
    which,
)

NEEDED = ("mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "sacctmgr")
CLUSTERS = ("home", "away")
_PASSWORD = "cloudddp-test"


@dataclass
class Accounting:
    """The database, slurmdbd and the clusters by name (``home``: the login node's own)."""

    root: Path
    clusters: dict[str, SlurmCluster] = field(default_factory=dict)
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, label: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with open(self.root / f"{label}.out", "ab") as out:
            self._procs.append(
                subprocess.Popen(
                    argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,  # noqa: PLW1509 - one libc call, no locks taken
                    env=env,
                )
            )
        watchdog.guard(self._procs[-1].pid)

    def check_alive(self) -> None:
        for proc in self._procs:
            if proc.poll() is not None:
                said = Path(self.root / f"{Path(str(proc.args[0])).name}.out")
                tail = said.read_text(errors="replace")[-500:] if said.exists() else ""
                raise SlurmUnavailable(f"{proc.args[0]} exited with {proc.returncode}: {tail}")

    def stop(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()
        for proc in reversed(self._procs):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            watchdog.release(proc.pid)


def _tool(name: str) -> str:
    found = which(name)
    assert found, name
    return found


def _munge(rig: Accounting) -> Path:
    folder = rig.root / "munge"
    folder.mkdir(mode=0o755)
    key, socket = folder / "munge.key", folder / "munge.socket"
    subprocess.run([_tool("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True, timeout=30)
    rig.spawn(
        "munged",
        [
            _tool("munged"),
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={socket}",
            f"--pid-file={folder}/munged.pid",
            f"--log-file={rig.root}/munged.log",
            f"--seed-file={folder}/munged.seed",
        ],
    )
    _wait_for(socket.exists, 10, "munged socket", rig.check_alive)
    return socket


def _database(rig: Accounting) -> int:
    """MariaDB in the rig's folder on a free port, with a user for slurmdbd; its port."""
    data, socket = rig.root / "db", rig.root / "mysqld.sock"
    subprocess.run(
        [_tool("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root", "--skip-test-db"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (port,) = free_ports(1)
    rig.spawn(
        "mariadbd",
        [
            _tool("mariadbd"),
            "--no-defaults",
            f"--datadir={data}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={socket}",
            f"--pid-file={rig.root}/mysqld.pid",
            "--user=root",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=32M",
        ],
    )
    client = [_tool("mariadb"), "--no-defaults", f"--socket={socket}", "-uroot"]
    ready = lambda: subprocess.run([*client, "-e", "select 1"], capture_output=True, timeout=10).returncode == 0  # noqa: E731
    _wait_for(ready, 30, "mariadbd", rig.check_alive)
    grant = (
        f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{_PASSWORD}'; "
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
    )
    subprocess.run([*client, "-e", grant], check=True, capture_output=True, timeout=30)
    return port


def _slurmdbd(rig: Accounting, munge: Path, db_port: int) -> str:
    """slurmdbd on a free port; the slurm.conf lines that send a cluster's accounting there."""
    folder = rig.root / "dbd"
    folder.mkdir()
    (port,) = free_ports(1)
    conf = folder / "slurmdbd.conf"
    conf.write_text(
        f"AuthType=auth/munge\nAuthInfo=socket={munge}\nDbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={port}\n"
        f"SlurmUser=root\nStorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={db_port}\n"
        f"StorageUser=slurm\nStoragePass={_PASSWORD}\nStorageLoc=slurm_acct_db\nPidFile={folder}/slurmdbd.pid\n"
        f"LogFile={rig.root}/slurmdbd.log\n"
    )
    conf.chmod(0o600)  # slurmdbd refuses a readable file: it holds the database's password
    # slurmdbd reads slurmdbd.conf from the folder of SLURM_CONF.
    rig.spawn(
        "slurmdbd", [_tool("slurmdbd"), "-D"], env={"SLURM_CONF": str(folder / "slurm.conf"), "PATH": "/usr/bin:/bin"}
    )
    lines = (
        "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
        f"AccountingStoragePort={port}\nAccountingStoragePass={munge}\nJobAcctGatherType=jobacct_gather/none\n"
    )
    sacctmgr = [_tool("sacctmgr"), "-i", "add", "cluster", *CLUSTERS]
    first = folder / "client.conf"
    first.write_text(f"ClusterName={CLUSTERS[0]}\nSlurmctldHost=localhost\n{lines}")
    env = {"SLURM_CONF": str(first), "PATH": "/usr/bin:/bin"}
    answered = lambda: subprocess.run(sacctmgr, capture_output=True, timeout=30, env=env).returncode == 0  # noqa: E731
    _wait_for(answered, 60, "slurmdbd", rig.check_alive)
    return lines


def unavailable() -> str | None:
    """Why the rig cannot run here, or None."""
    missing = [t for t in NEEDED if which(t) is None]
    if missing:
        return (
            f"no slurmdbd and MariaDB ({', '.join(missing)} missing): "
            "`make system-deps` installs slurmdbd and mariadb-server"
        )
    return unavailable_reason()


def accounting_fixture(root: Path) -> Iterator[Accounting]:
    """Body of a fixture: the running rig; raises SlurmUnavailable when it cannot start (the caller skips)."""
    reason = unavailable()
    if reason:
        raise SlurmUnavailable(reason)
    root.chmod(0o755)
    rig = Accounting(root)
    try:
        try:
            munge = _munge(rig)
            lines = _slurmdbd(rig, munge, _database(rig))
            for name in CLUSTERS:
                (root / name).mkdir()
                rig.clusters[name] = start_cluster(root / name, name=name, extra=lines, munge_socket=munge)
        except (OSError, subprocess.SubprocessError, TimeoutError) as e:
            raise SlurmUnavailable(f"the accounting rig did not start: {e}") from e
        yield rig
    finally:
        rig.stop()
        shutil.rmtree(root, ignore_errors=True)
