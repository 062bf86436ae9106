"""Where a run's files are on the cluster's shared filesystem, under the working folder."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """A run's folders and files under ``workdir`` (a path, or the placeholder bound at submit)."""

    workdir: str
    run_id: str

    @property
    def run_dir(self) -> str:
        return f"{self.workdir}/runs/{self.run_id}"

    @property
    def code_dir(self) -> str:
        return f"{self.run_dir}/code"

    @property
    def script(self) -> str:
        return f"{self.run_dir}/job.sbatch"

    @property
    def batch_log(self) -> str:
        return f"{self.run_dir}/batch.log"

    @property
    def model_dir(self) -> str:
        return f"{self.run_dir}/outputs"

    def node_log(self, node: int | str) -> str:
        return f"{self.run_dir}/logs/node{node}.log"

    def archive(self, sha256: str) -> str:
        return f"{self.workdir}/code/{sha256}.tar.gz"
