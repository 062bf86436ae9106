"""The folder of one local run, and the status file its supervisor keeps there.

runs/<run_id>/
    spec.yaml        the spec, secrets redacted
    plan.json        the plan that was launched (port and folders filled in)
    status.json      state, process ids, exit codes, failure details (written atomically; LocalRunStatus)
    logs/node<i>.log what each torchrun "node" printed, rank-prefixed
    ranks/           torchrun's per-rank stdout/stderr files, by attempt; node<i>.console, what each torchrun agent
                     printed (raw: secrets are redacted when it is copied to the log), and node<i>.exit, its exit code
    logs/node<i>.cursor  how far the console has been copied (for a supervisor that takes over)
    supervisor.lock  held (flock) by the one supervisor of the run
    hooks/           the sitecustomize that lets each rank print its Python stacks (the stall watchdog)
    metrics.jsonl    rank 0's metric records, one JSON object a line
    code/            the code snapshot, unpacked: the processes' working folder
    code-files.json  what the snapshot held, for a script other than the shared one (to name what it left there)
    outputs/         CLOUDDDP_OUTPUT_DIR: the final model
    supervisor.log   the supervisor's own messages
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudddp.backends.local.record import LocalRunStatus, checked, parsed
from cloudddp.backends.local.request import LocalRequest
from cloudddp.injob.keepfiles import matches
from cloudddp.paths import home, read_trusted

STATUS_BYTES = 1 << 20
"""A status file is a few hundred bytes; one larger than this is read as damaged (cut short, it does not parse)."""


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def for_run(cls, run_id: str) -> RunDir:
        return cls(home() / "runs" / run_id)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def plan(self) -> Path:
        return self.path / "plan.json"

    def request(self) -> LocalRequest:
        """The request of the plan that was launched (``plan.json``), read back typed."""
        return LocalRequest.from_dict(json.loads(self.plan.read_text())["request"])

    @property
    def status_file(self) -> Path:
        return self.path / "status.json"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def outputs(self) -> Path:
        return self.path / "outputs"

    @property
    def ranks(self) -> Path:
        return self.path / "ranks"

    @property
    def code(self) -> Path:
        return self.path / "code"

    def remember_code_files(self) -> None:
        """Note what the unpacked snapshot holds, so files the script writes next to it can be named later."""
        (self.path / "code-files.json").write_text(json.dumps(sorted(_files(self.code))))

    def left_behind(self, limit: int = 5) -> list[str]:
        """Files the script wrote into its working folder (not in the snapshot, not Python's caches, not declared in
        checkpoint.files): discarded with the run. [] when the snapshot's files were not noted (the shared
        script, which checkpoints)."""
        noted = self.path / "code-files.json"
        if not noted.is_file() or not self.code.is_dir():
            return []
        shipped = set(json.loads(noted.read_text()))
        kept = self.request().keep_files if self.plan.is_file() else ()
        return sorted(f for f in _files(self.code) - shipped if not matches(kept, f))[:limit]

    def node_log(self, node: int) -> Path:
        return self.path / "logs" / f"node{node}.log"

    def console(self, node: int) -> Path:
        return self.ranks / f"node{node}.console"

    def exit_file(self, node: int) -> Path:
        return self.ranks / f"node{node}.exit"

    def cursor(self, node: int) -> Path:
        return self.path / "logs" / f"node{node}.cursor"

    def supervisor_lock(self) -> int:
        """An open descriptor of ``supervisor.lock``: the one supervisor of the run holds its ``flock``."""
        return os.open(self.path / "supervisor.lock", os.O_RDWR | os.O_CREAT, 0o600)

    def node_logs(self) -> list[Path]:
        return [self.node_log(i) for i in range(self.read_status().nodes)]

    def read_status(self) -> LocalRunStatus:
        """The run's record (``status.json``); the all-defaults one while the file is missing or damaged."""
        return parsed(self._status_data())

    def write_status(self, **changes: Any) -> LocalRunStatus:
        """Merge ``changes`` (fields of :class:`LocalRunStatus`, as JSON values) into status.json atomically (temp
        file + rename); a key the record does not have is refused. The file keeps every key it had."""
        data = {**self._status_data(), **checked(changes)}
        write_json_atomic(self.status_file, data)
        return parsed(data)

    def _status_data(self) -> dict[str, Any]:
        """The record as written; refused when another user could have written it (its pids get signalled)."""
        try:
            data = json.loads(read_trusted(self.status_file, "the run's status file", limit=STATUS_BYTES))
        except (FileNotFoundError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def write_json_atomic(path: Path, data: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _files(folder: Path) -> set[str]:
    found = set()
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found |= {Path(root, f).relative_to(folder).as_posix() for f in files if not f.endswith(".pyc")}
    return found
