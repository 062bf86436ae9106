"""Which Azure ML workspace: the spec, else ``config.json`` as ``Workspace.from_config()`` found it, else env."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from cloudddp.backends.azureml.options import AzureMLOptions
from cloudddp.errors import UserError
from cloudddp.plan import JsonDataclass, Target

ENV = {
    "subscription_id": "AZURE_SUBSCRIPTION_ID",
    "resource_group": "AZURE_RESOURCE_GROUP",
    "name": "AZUREML_WORKSPACE_NAME",
}


@dataclass(frozen=True)
class Workspace(JsonDataclass):
    """An Azure ML workspace, fully named (a run's record keeps it, :mod:`.record`)."""

    subscription_id: str
    resource_group: str
    name: str


def _config_json(start: Path) -> dict[str, str] | None:
    """config.json in the folder or a parent, directly or under .azureml/ (the SDK v1 search)."""
    for folder in [start, *start.parents]:
        for path in (folder / "config.json", folder / ".azureml" / "config.json"):
            if path.is_file():
                try:
                    data = json.loads(path.read_text())
                except ValueError:
                    raise UserError(f"{path} is not valid JSON") from None
                if isinstance(data, dict) and "subscription_id" in data:
                    return {
                        "subscription_id": data.get("subscription_id", ""),
                        "resource_group": data.get("resource_group", ""),
                        "name": data.get("workspace_name", ""),
                    }
    return None


def workspace_fields(az: AzureMLOptions | None, cwd: Path | None = None) -> dict[str, str]:
    """What names the workspace, from the spec, else config.json, else the environment (may be partial)."""
    found: dict[str, str] = {}
    if az is not None:
        found = {
            k: v
            for k, v in {
                "subscription_id": az.subscription_id,
                "resource_group": az.resource_group,
                "name": az.workspace,
            }.items()
            if v
        }
    for source in (_config_json(cwd or Path.cwd()), {k: os.environ.get(v, "") for k, v in ENV.items()}):
        for key, value in (source or {}).items():
            if value and key not in found:
                found[key] = value
    return found


def require_workspace(found: dict[str, str]) -> Workspace:
    """The workspace ``found`` names; a UserError saying what is missing and where to set it."""
    missing = [key for key in ENV if not found.get(key)]
    if missing:
        names = {
            "subscription_id": "azureml.subscription_id / AZURE_SUBSCRIPTION_ID",
            "resource_group": "azureml.resource_group / AZURE_RESOURCE_GROUP",
            "name": "azureml.workspace / AZUREML_WORKSPACE_NAME",
        }
        raise UserError(
            "the Azure ML workspace is not fully named; missing: " + ", ".join(names[m] for m in missing),
            hint="set them in the spec, in the environment, or in a config.json from the Azure portal",
        )
    return Workspace(found["subscription_id"], found["resource_group"], found["name"])


@dataclass(frozen=True)
class AzureMLTarget(Target):
    """Where an Azure ML plan goes: the workspace, named as far as the spec, a config.json or the environment say
    (a render does not need all of it; a launch does), and the training's checkpoint folder in its datastore."""

    workspace: dict[str, str]
    checkpoints: str | None = None
