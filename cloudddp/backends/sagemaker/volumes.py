"""What SageMaker refuses or ignores about a training job's storage and network, said at render.

- Instance types with local NVMe instance storage encrypt it with a hardware module on the instance:
  CreateTrainingJob refuses ``ResourceConfig.VolumeKmsKeyId`` on them, and ``VolumeSizeInGB`` has no
  effect there (SageMaker puts /opt/ml on the instance storage). botocore's ResourceConfig doc strings
  (1.44.5) say both and name ml.p4d, ml.g4dn and ml.g5; the other families below list NVMe instance
  storage in EC2's instance-type specifications (EC2 User Guide, "Instance store volumes").
  EC2's data (``InstanceStorageSupported``, as moto bundles it) agrees for every type it describes (a test).
- Under network isolation the container has no network, so pip cannot fetch the job's requirements
  from an index: only a requirements file that installs from the snapshot (``--no-index`` with local
  wheels) can work.
"""

from __future__ import annotations

import re

from cloudddp.errors import UserError

# Families of SageMaker training types with local NVMe instance storage (GPU, Trainium, and the CPU "d" types).
LOCAL_STORAGE_FAMILIES = frozenset(
    {
        "p3dn",
        "p4d",
        "p4de",
        "p5",
        "p5e",
        "p5en",
        "p6-b200",
        "p6-b300",
        "p6e-gb200",
        "g4dn",
        "g5",
        "g6",
        "g6e",
        "g7",
        "g7e",
        "trn1",
        "trn1n",
        "trn2",
    }
)
_CPU_WITH_DISK = re.compile(r"^[cmr]\d+[a-z]*d[a-z]*$")  # m5d, c5d, r5d, m6id, c6id, ...
# Families that take VolumeKmsKeyId (EBS storage only), for the refusal's hint. Every current GPU family of
# SageMaker training has NVMe instance storage; the EBS-only ml.p3 is retired (cloudddp/data/skus.csv).
EBS_FAMILIES = ("ml.m5", "ml.c5", "ml.r5", "ml.m6i", "ml.c6i", "ml.r6i", "ml.m7i", "ml.c7i", "ml.r7i")


def family(instance_type: str) -> str:
    parts = instance_type.split(".")
    return parts[1] if len(parts) == 3 else instance_type


def has_local_storage(instance_type: str) -> bool:
    name = family(instance_type)
    return name in LOCAL_STORAGE_FAMILIES or bool(_CPU_WITH_DISK.match(name))


def check_volume(instance_type: str, volume_kms_key: str | None, volume_gb: int) -> list[str]:
    """Exit 2 for a volume key on a local-storage type; the notes about the volume for the plan."""
    if not has_local_storage(instance_type):
        return []
    if volume_kms_key:
        raise UserError(
            f"sagemaker.volume_kms_key on {instance_type}: its storage is local NVMe, encrypted by the "
            "instance's own hardware module, and SageMaker refuses VolumeKmsKeyId on instance types with "
            "local storage (CreateTrainingJob, ResourceConfig.VolumeKmsKeyId)",
            hint="drop sagemaker.volume_kms_key (the NVMe volumes are encrypted anyway); only types with EBS "
            f"storage take it: {', '.join(f + '.*' for f in EBS_FAMILIES)} (CPU; no current GPU type of "
            "SageMaker training is EBS-only)",
        )
    return [
        f"{instance_type} has local NVMe storage: /opt/ml lives there and VolumeSizeInGB ({volume_gb}) has "
        "no effect (botocore, ResourceConfig.VolumeSizeInGB)"
    ]


def check_isolation(network_isolation: bool, requirement_lines: tuple[str, ...] | None) -> None:
    """Exit 2 for requirements that pip would fetch from an index inside a network-isolated container."""
    if not network_isolation or not requirement_lines:
        return
    if any(line.split()[0] in ("--no-index", "--no-index=true") for line in requirement_lines if line.strip()):
        return
    raise UserError(
        "sagemaker.network_isolation with requirements: the container has no network, so pip cannot "
        "download them and the job would fail before training",
        hint="vendor the wheels into code.dir and write the requirements as '--no-index' plus "
        "'./wheels/<name>.whl' lines, or drop sagemaker.network_isolation",
    )
