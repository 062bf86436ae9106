"""A Slurm training's checkpoint folder as a checkpoint store, on the test cluster reached through a real sshd
as a login host: a carry there streams every file over ssh, a compute node reads it whole, and a write cut short
leaves nothing under the file's name."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.backends.checkpoints.carry import carry
from cloudddp.backends.checkpoints.store import CHUNK, CheckpointStore
from cloudddp.backends.local.checkpoint_store import LocalCheckpoints
from cloudddp.backends.plugins import spec_from_dict
from cloudddp.backends.slurm import SlurmBackend
from cloudddp.backends.slurm.checkpoint_store import SlurmCheckpoints
from cloudddp.errors import CloudDDPError
from tests.support.cli import FIXTURES
from tests.support.rigs import rig_unavailable
from tests.support.slurm_cluster import SlurmCluster
from tests.support.ssh_server import SshServer, SshUnavailable, ssh_server
from tests.support.streams import Breaking

pytestmark = pytest.mark.slow

NEWEST = "ckpt-e0001-s0000300.pt"


@pytest.fixture
def login(cluster: SlurmCluster, tmp_path: Path) -> Iterator[SshServer]:
    """The cluster's login node as a real sshd."""
    try:
        with ssh_server(tmp_path / "sshd", {"SLURM_CONF": str(cluster.conf)}) as server:
            yield server
    except SshUnavailable as e:
        rig_unavailable(f"no sshd to stand in for a login node: {e}")


def store_through(login: SshServer, work: Path) -> CheckpointStore:
    """The checkpoint folder a Slurm plan names for a job with ``slurm.workdir``, opened as its run's record
    would be."""
    spec = spec_from_dict(
        {
            "name": "carried",
            "code": {"dir": str(FIXTURES / "tinyjob"), "command": ["true"]},
            "slurm": {"workdir": str(work), "login_host": login.host, "ssh_options": list(login.options)},
            "checkpoint": {"enabled": True},
        }
    )
    plan = SlurmBackend().render(spec)
    assert plan.target.checkpoints.startswith(f"{work}/"), plan.target
    return SlurmBackend().checkpoint_store(json.loads(json.dumps(plan.target.to_dict())))


def test_a_carry_to_the_cluster_through_ssh_streams_every_file_and_a_node_reads_it_whole(
    cluster: SlurmCluster, login: SshServer, tmp_path: Path
) -> None:
    here = tmp_path / "here"
    (here / "files").mkdir(parents=True)
    payload = os.urandom(3 * CHUNK + 17)
    (here / NEWEST).write_bytes(payload)
    (here / f"{NEWEST}.sha256").write_text(hashlib.sha256(payload).hexdigest())
    (here / "files" / "it's a name with spaces.json").write_text("{}")
    store = store_through(login, tmp_path / "work")
    assert store.location.startswith(f"{login.host}:")

    carried = carry(LocalCheckpoints(here), store)
    assert set(carried.copied) == {NEWEST, f"{NEWEST}.sha256", "files/it's a name with spaces.json"}
    folder = Path(store.location.partition(":")[2])
    on_node = cluster.run("srun", "-N1", "-w", "node2", "sha256sum", str(folder / NEWEST), timeout=60).stdout
    assert on_node.split()[0] == hashlib.sha256(payload).hexdigest()
    assert stat.S_IMODE((folder / NEWEST).stat().st_mode) == 0o600
    assert stat.S_IMODE((folder / "files").stat().st_mode) == 0o700
    assert sorted(p.name for p in folder.iterdir()) == sorted([NEWEST, f"{NEWEST}.sha256", "files"])  # no temporary

    assert carry(LocalCheckpoints(here), store).copied == ()
    back = carry(store, LocalCheckpoints(tmp_path / "back"))
    assert back.resumes_from == NEWEST and (tmp_path / "back" / NEWEST).read_bytes() == payload


def test_a_write_cut_short_leaves_the_file_as_it_was_and_no_temporary(login: SshServer, tmp_path: Path) -> None:
    store = store_through(login, tmp_path / "work")
    assert isinstance(store, SlurmCheckpoints)
    with pytest.raises(OSError, match="went away"):
        store.write(NEWEST, Breaking())  # type: ignore[arg-type]
    folder = Path(store.folder)
    assert not folder.exists() or list(folder.iterdir()) == [], list(folder.iterdir())
    with pytest.raises(CloudDDPError, match=r"exited 1 .*no such file"):
        store.sha256(NEWEST)
    store.write("files/state.json", io.BytesIO(b"saved before"))
    with pytest.raises(OSError, match="went away"):
        store.write("files/state.json", Breaking())  # type: ignore[arg-type]
    assert [p.name for p in (folder / "files").iterdir()] == ["state.json"]
    assert (folder / "files" / "state.json").read_bytes() == b"saved before"


def test_a_folder_the_cluster_cannot_make_is_an_error_with_what_the_cluster_said(
    login: SshServer, tmp_path: Path
) -> None:
    (tmp_path / "work").write_text("a file where the workdir should be")
    store = store_through(login, tmp_path / "work")
    here = tmp_path / "here"
    here.mkdir()
    (here / "big.ckpt").write_bytes(os.urandom(4 * CHUNK))  # more than a pipe holds: the writer sees it stop
    with pytest.raises(CloudDDPError, match=r"cloudddp-carry .* exited [1-9].*(Not a directory|File exists)"):
        carry(LocalCheckpoints(here), store)
    assert (tmp_path / "work").read_text() == "a file where the workdir should be"
