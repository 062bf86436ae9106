"""The ``azureml:`` section of a job spec."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from cloudddp.backends.azureml.environment import DEFAULT_ENVIRONMENT
from cloudddp.catalog import find, skus
from cloudddp.spec.model import Strict


class AzureMLOptions(Strict):
    """Only the Azure ML backend reads this."""

    env_fallbacks: ClassVar[dict[str, tuple[str, ...]]] = {
        "subscription_id": ("AZURE_SUBSCRIPTION_ID",),
        "resource_group": ("AZURE_RESOURCE_GROUP",),
        "workspace": ("AZUREML_WORKSPACE_NAME",),
    }

    subscription_id: str | None = Field(None, description="The workspace's Azure subscription.")
    resource_group: str | None = Field(None, description="The workspace's resource group.")
    workspace: str | None = Field(
        None,
        description="The workspace's name. Without these three: a config.json in the folder or a parent, as "
        "Workspace.from_config() finds it.",
    )
    compute: str | None = Field(
        None,
        description="AmlCompute cluster name; created when missing, grown (max_instances "
        "only) when too small, otherwise left as it is. 'auto': a cluster named after its workspace, size and tier "
        "(cdp<workspace>-<size>-d, cdp<workspace>-<size>-lp). Unset (the default): serverless compute, no cluster.",
    )
    vm_size: str | None = Field(None, description="e.g. Standard_ND96asr_v4; default: chosen from resources.")
    min_nodes: int = Field(0, ge=0, description="Nodes a new cluster keeps when idle.")
    max_nodes: int | None = Field(None, ge=1, description="Cluster maximum; default: the job's node count.")
    idle_time_before_scale_down: int = Field(
        300, description="Seconds a new cluster's idle nodes stay up before scaling down (at least 1)."
    )
    environment: str = Field(
        DEFAULT_ENVIRONMENT,
        description="azureml:<name>:<version>, azureml:<name>@latest, azureml://registries/<r>/environments/<name>/"
        "versions/<v> (or /labels/<l>), or a Docker image URI. Default: curated acpt-pytorch-2.8-cuda12.6, "
        "version 14 (PyTorch 2.8, CUDA 12.6).",
    )
    shm_size: str | None = Field(
        None,
        description="The containers' /dev/shm (DataLoader workers pass batches through it), e.g. 64g; default: "
        "half the VM size's memory when the catalog knows it, else 16g.",
    )
    experiment_name: str | None = Field(None, description="The experiment the job is filed under; default: its name.")
    ssh_public_key: str | None = Field(
        None,
        description="An OpenSSH public key: a new cluster then allows SSH (user azureuser) with it; "
        "without it a new cluster has SSH public access disabled.",
    )
    subnet: str | None = Field(
        None,
        description="A new cluster's subnet, as its resource id (/subscriptions/.../virtualNetworks/<vnet>/subnets/"
        "<name>): the nodes join that virtual network.",
    )
    node_public_ip: bool = Field(
        True,
        description="Whether a new cluster's nodes get public IPs (azure-ai-ml's default). Many companies' Azure "
        "Policy forbids them: false needs azureml.subnet (the nodes reach Azure through the virtual network).",
    )
    identity: str | None = Field(
        None,
        description="A new cluster's managed identity: 'system' (system-assigned) or the resource id of a "
        "user-assigned identity (/subscriptions/.../userAssignedIdentities/<name>), for data access without keys.",
    )
    job_identity: Literal["user", "managed"] | None = Field(
        None,
        description="The identity the job's code reads data with: 'user' (the submitter's, user_identity) or "
        "'managed' (the compute's managed identity; serverless: the workspace's). Default: Azure ML's (the "
        "datastores' own credentials).",
    )
    job_tier: Literal["spot", "standard"] | None = Field(
        None,
        description="Serverless compute only (queue_settings.job_tier); default: spot for resources.spot, else "
        "standard. Serverless compute takes these two tiers only (not the API's basic or premium); refused on a "
        "cluster (its tier decides) and when it contradicts resources.spot.",
    )

    @field_validator("subscription_id", "resource_group", "workspace")
    @classmethod
    def _not_the_templates_placeholder(cls, value: str | None) -> str | None:
        if value is not None and re.fullmatch(r"\s*<[^<>]*>\s*", value):
            raise ValueError(
                f"{value} is the template's placeholder, not a value: give your own (az account show --query id "
                "gives the subscription id; az ml workspace list -o table the resource group and workspace), or "
                "delete the line and set AZURE_SUBSCRIPTION_ID / AZURE_RESOURCE_GROUP / AZUREML_WORKSPACE_NAME"
            )
        return value

    @field_validator("vm_size")
    @classmethod
    def _no_typo_of_a_catalog_size(cls, value: str | None) -> str | None:
        guess = azure_size_typo(value) if value else None
        if guess:
            raise ValueError(
                f"{value} is not an Azure VM size; did you mean '{guess}'? (`cloudddp skus -b azureml` lists the "
                "sizes cloudddp knows; `az vm list-sizes -l <region>` every size a region offers)"
            )
        return value

    @field_validator("idle_time_before_scale_down")
    @classmethod
    def _a_delay_azure_takes(cls, value: int) -> int:
        if value < 1:
            raise ValueError(
                f"{value} is not a delay Azure ML sets: azure-ai-ml sends no value for 0 and the cluster "
                "gets the service default (120 s); give 1 or more seconds"
            )
        return value

    @field_validator("ssh_public_key")
    @classmethod
    def _an_openssh_public_key(cls, value: str | None) -> str | None:
        return _stripped_if_valid(
            value,
            lambda v: v.startswith(("ssh-", "ecdsa-")),
            "not an OpenSSH public key (it starts with ssh-rsa, ssh-ed25519 or ecdsa-...): paste the contents of "
            "your .pub file",
        )

    @field_validator("subnet")
    @classmethod
    def _a_subnet_resource_id(cls, value: str | None) -> str | None:
        return _stripped_if_valid(
            value,
            lambda v: _SUBNET_ID.fullmatch(v) is not None,
            "give the subnet's resource id: /subscriptions/<subscription guid>/resourceGroups/<rg>/providers/"
            "Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>",
        )

    @field_validator("identity")
    @classmethod
    def _system_or_a_user_assigned_identity(cls, value: str | None) -> str | None:
        return _stripped_if_valid(
            value,
            lambda v: v == "system" or _IDENTITY_ID.fullmatch(v) is not None,
            "'system' or a user-assigned identity's resource id: /subscriptions/<id>/resourceGroups/<rg>/"
            "providers/Microsoft.ManagedIdentity/userAssignedIdentities/<name>",
        )

    @model_validator(mode="after")
    def _no_public_ip_needs_a_subnet(self) -> AzureMLOptions:
        if not self.node_public_ip and self.subnet is None:
            raise ValueError(
                "node_public_ip: false needs azureml.subnet: without a public IP the nodes reach Azure through "
                "a virtual network"
            )
        return self


_GUID = r"[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}"
"""A subscription id: azure-ai-ml takes a subnet as a resource id only with one (else it builds another path)."""
_SUBNET_ID = re.compile(
    r"/subscriptions/"
    + _GUID
    + r"/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+",
    re.IGNORECASE,
)
_IDENTITY_ID = re.compile(
    r"/subscriptions/"
    + _GUID
    + r"/resourceGroups/[^/]+/providers/Microsoft\.ManagedIdentity/userAssignedIdentities/[^/]+",
    re.IGNORECASE,
)


def _stripped_if_valid(value: str | None, valid: Callable[[str], bool], problem: str) -> str | None:
    """``value`` without surrounding blanks when ``valid`` says so; a ValueError saying ``problem`` otherwise."""
    if value is None:
        return None
    if not valid(value.strip()):
        raise ValueError(problem)
    return value.strip()


def azure_size_typo(name: str) -> str | None:
    """The catalog size ``name`` misspells: the same name without its version (``Standard_NC24ads_A100`` for
    ``Standard_NC24ads_A100_v4``), or one letter added or dropped; None for a catalog size or one not near any
    (a size the catalog lacks may well be real: the preflight asks the region)."""
    if find(name) is not None:
        return None
    key = name.lower()
    for size in (s.size for s in skus("azure")):
        low = size.lower()
        if low.startswith(key + "_") or _one_letter_apart(key, low):
            return size
    return None


def _one_letter_apart(a: str, b: str) -> bool:
    """``b`` is ``a`` with one character added or dropped (``..._v44`` for ``..._v4``)."""
    if abs(len(a) - len(b)) != 1:
        return False
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))
