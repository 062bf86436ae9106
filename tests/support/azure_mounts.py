"""Azure ML's read-write mount of a job's outputs (``rw_mount``, blobfuse on the nodes), emulated for the jobs of
the rig's workspace (azure_nodes.py): each output is a folder on this machine (``Datastores``' folder of its URI)
that mirrors the blobs under the output's datastore path in the workspace's container on Azurite (the container
behind the datastore: ``WorkspaceModel.datastore_container``), where cloudddp (a run moving to another backend)
and a user (Storage Explorer, ``az storage blob``) read what the job wrote.

As blobfuse does it:

- The folder shows what the blobs hold when the job starts: before its processes start, the folder is emptied and
  filled from the blobs under the path. An attempt resumes from what an earlier attempt uploaded, never from what
  it left on this machine.
- What the processes write reaches the blobs: while the job runs, a file once it has stopped changing; when the
  attempt ends (finished, preempted, stopped), every file written or changed, before the job's status moves on.
  A file deleted from the folder (an old checkpoint rotated out) is deleted from the container.

What differs from blobfuse:

- Every node sees the one folder on this machine, at once. On Azure each node has its own mount and file cache,
  and sees a file another node wrote once it is uploaded (and its cached listing expires).
- While the job runs, a file is uploaded once its size and modification time are the same two looks in a row
  (about a second apart), not when its writer closes it. A checkpoint written to a temporary name and renamed
  (cloudddp's saves) reaches the container whole either way.
- When the attempt ends, every file is uploaded as it is, a file a killed process left half written included;
  blobfuse uploads a file when it is closed, so one still open when a node goes away is lost.
- No blobs stand for folders (blobfuse may write an empty marker blob for an empty folder); a symbolic link is
  uploaded as the file it points to.
"""

from __future__ import annotations

import shutil
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.azure_launchers import Datastores
from tests.support.azure_rig import WorkspaceModel

Stamp = tuple[int, int]
"""A file's size and modification time (ns): it changed when its stamp did."""


def stamps(folder: Path) -> dict[str, Stamp]:
    """Every file under ``folder`` (relative, ``/`` between parts) with its stamp."""
    found = {}
    for path in sorted(folder.rglob("*")):
        with suppress(FileNotFoundError):  # a temporary file renamed or removed while listed
            if path.is_file():
                info = path.stat()
                found[path.relative_to(folder).as_posix()] = (info.st_size, info.st_mtime_ns)
    return found


@dataclass
class Mount:
    """One output's folder and the blobs under ``prefix`` (``path/``) in ``container``."""

    folder: Path
    container: Any
    prefix: str
    sent: dict[str, Stamp] = field(default_factory=dict)
    """What the container holds, by the stamp the file had when it was downloaded or uploaded."""
    looked: dict[str, Stamp] = field(default_factory=dict)
    """Every file's stamp at the last look: one unchanged since then has stopped changing."""

    def fill(self) -> None:
        """The folder emptied, then filled from the blobs under the prefix."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        for blob in self.container.list_blobs(name_starts_with=self.prefix):
            target = self.folder / blob.name[len(self.prefix) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as out:
                self.container.download_blob(blob.name).readinto(out)
        self.sent = self.looked = stamps(self.folder)

    def upload(self, *, settled_only: bool) -> None:
        """Upload each file written or changed since it was last sent (with ``settled_only``, only those unchanged
        since the last look) and delete the blobs of files gone from the folder."""
        now = stamps(self.folder)
        for name, stamp in now.items():
            if self.sent.get(name) == stamp or (settled_only and self.looked.get(name) != stamp):
                continue
            with suppress(FileNotFoundError), open(self.folder / name, "rb") as data:
                self.container.upload_blob(self.prefix + name, data, overwrite=True)
                self.sent[name] = stamp
        for name in set(self.sent) - set(now):
            self.container.delete_blob(self.prefix + name)
            del self.sent[name]
        self.looked = now


class BlobMounts(Datastores):
    """The datastores of the rig's workspace: an output's folder is a :class:`Mount` of its blobs, filled when the
    launcher asks for it (before the job's processes start) and uploaded by :meth:`sync`."""

    def __init__(self, model: WorkspaceModel, root: Path) -> None:
        super().__init__(root)
        self.model = model
        self.mounts: list[Mount] = []

    def output(self, uri: str) -> Path:
        store, path = self.parts(uri)
        container = self.model.container_client(self.model.datastore_container(store))
        mount = Mount(self.folder(uri), container, f"{path}/" if path else "")
        mount.fill()
        self.mounts.append(mount)
        return mount.folder

    def sync(self, *, settled_only: bool = False) -> None:
        """What the processes wrote, uploaded (``settled_only``: only files that have stopped changing)."""
        for mount in self.mounts:
            mount.upload(settled_only=settled_only)
