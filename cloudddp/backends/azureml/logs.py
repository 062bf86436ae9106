"""A job's log files, read where Azure ML writes them, a few new bytes at a time.

Azure ML uploads each process's output to the job's artifact store while the job runs
(``user_logs/std_log_process_<rank>.txt`` with the rank zero-padded, ``std_log_process_00.txt``, ``…_01``, as
azure-ai-ml's own tests model them; ``user_logs/std_log.txt`` for a single process): a folder that
the job lists as its ``default`` output (``azureml://datastores/workspaceartifactstore/ExperimentRun/dcid.<job>``),
which is where azure-ai-ml's own ``jobs.stream`` and ``jobs.download`` look too. This reads it with public
APIs only: ``jobs.get`` (the ``default`` output), ``datastores.get(include_secrets=True)`` (datastores.py: the
storage account, container and a key or SAS, else the caller's Entra credential), then azure-storage-blob: one
listing per poll, whose blob sizes say which files grew, and an HTTP Range read (``download_blob(offset=...)``) of
only the new bytes of those. A file written again from its start (a preempted job restarted by Azure ML) is read
again from its start.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import Any

from cloudddp.backends.azureml.datastores import blob_container
from cloudddp.backends.status import LogLine

ARTIFACT_STORE = "workspaceartifactstore"
_DATASTORE_URI = re.compile(r"^azureml://datastores/(?P<store>[^/]+)/(?:paths/)?(?P<prefix>.+?)/*$")
_PROCESS = re.compile(r"^std_log_process_(?P<rank>\d+)(?P<ps>_ps)?$")


def log_location(job: Any) -> tuple[str, str]:
    """(datastore, folder) holding the job's logs: its ``default`` output, else Azure ML's fixed place."""
    outputs = getattr(job, "outputs", None) or {}
    default = outputs.get("default") if hasattr(outputs, "get") else None
    match = _DATASTORE_URI.match(str(getattr(default, "path", "") or ""))
    if match:
        return match["store"], match["prefix"]
    return ARTIFACT_STORE, f"ExperimentRun/dcid.{job.name}"


def source_of(name: str) -> tuple[str, int | None]:
    """Where a file's lines come from, and the global rank that printed them: ``("rank3", 3)`` for
    ``user_logs/std_log_process_03.txt`` (or ``…_3.txt``: the rank read as an integer, however the runtime pads it),
    ``("rank0", 0)`` for a single process's ``std_log.txt``; another file (a parameter server's ``…_ps``, the
    runtime's own) is from outside the program (no rank)."""
    stem = PurePosixPath(name).stem
    match = _PROCESS.match(stem)
    if match and not match["ps"]:
        return f"rank{int(match['rank'])}", int(match["rank"])
    if match:
        return f"process_{int(match['rank'])}_ps", None
    if stem == "std_log":
        return "rank0", 0
    return stem.removeprefix("std_log_"), None


def _order(name: str) -> tuple[int, str]:
    """Files by rank as a number (``…_10`` after ``…_2``), then by name."""
    match = _PROCESS.match(PurePosixPath(name).stem)
    return (int(match["rank"]) if match else -1, name)


class LogFiles:
    """The ``user_logs/`` files of one job, with how much of each has been read."""

    def __init__(self, container: Any, prefix: str, owns_transport: bool) -> None:
        self.container = container
        self.prefix = prefix.rstrip("/") + "/"
        self.owns_transport = owns_transport
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}
        self.created: dict[str, Any] = {}
        """Each file's creation time when last read: a file made again is a new file (see :meth:`read`)."""

    @classmethod
    def of_job(cls, ml_client: Any, job: Any, credential: Any, transport: Any) -> LogFiles:
        store, prefix = log_location(job)
        container = blob_container(
            ml_client, store, credential, transport, holds="the job's logs are", fix="read them in Azure ML studio"
        )
        return cls(container, prefix, owns_transport=transport is None)

    def read(self, final: bool) -> list[LogLine]:
        """The lines written since the last read; a last line without its newline waits unless ``final``."""
        lines: list[LogLine] = []
        listed = self.container.list_blobs(name_starts_with=self.prefix + "user_logs/")
        blobs = sorted(listed, key=lambda b: _order(b.name))
        for blob in blobs:
            name = blob.name[len(self.prefix) :]
            self._restarted(name, blob)
            done = self.offsets.get(name, 0)
            data = self.partial.pop(name, b"")
            if blob.size > done:
                data += self.container.download_blob(blob.name, offset=done, length=blob.size - done).readall()
                self.offsets[name] = blob.size
            cut = len(data) if final else data.rfind(b"\n") + 1
            if cut < len(data):
                self.partial[name] = data[cut:]
            source, rank = source_of(name)
            lines += [
                LogLine(source, text, primary=rank == 0, rank=rank)
                for text in data[:cut].decode("utf-8", errors="replace").splitlines()
            ]
        return lines

    def _restarted(self, name: str, blob: Any) -> None:
        """Forget what was read of a file that was written again from its start: Azure ML restarts a preempted
        job on new nodes (not resumed) and its log files are written anew, so a file created again, or shorter
        than what was read, is read from its first byte."""
        created = getattr(blob, "creation_time", None)
        again = name in self.created and created != self.created[name]
        if again or blob.size < self.offsets.get(name, 0):
            self.offsets.pop(name, None)
            self.partial.pop(name, None)
        self.created[name] = created

    def close(self) -> None:
        if self.owns_transport:
            self.container.close()


def followed(files: LogFiles, *, follow: bool, finished: Callable[[], bool], poll: float) -> Iterator[LogLine]:
    """The lines of ``files``, read once; with ``follow``, every ``poll`` seconds until ``finished``, asked before
    each read, says the job has ended (so the last read gets its last lines). ``files`` is closed at the end."""
    try:
        while True:
            done = finished() if follow else True
            yield from files.read(final=done)
            if done:
                return
            time.sleep(poll)
    finally:
        files.close()
