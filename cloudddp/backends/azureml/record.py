"""What the run record keeps about an Azure ML run: the typed form of the info launch records, read back by
status, logs, metrics, cancel and the bill.

The run id is the job's name, unique in its workspace; the record adds which workspace. The base class and the
runner keep their own keys in the same info (metrics, estimate, target, the recovery chain, ...):
:meth:`~cloudddp.plan.JsonDataclass.from_fields` reads this record from among them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudddp.backends.azureml.workspace import Workspace
from cloudddp.plan import JsonDataclass


@dataclass(frozen=True, kw_only=True)
class AzureMLRunInfo(JsonDataclass):
    workspace: Workspace | None = None
    """The workspace the job was submitted to: every later call goes there (None: a record without it, a job
    found by name in the workspace the environment names)."""
