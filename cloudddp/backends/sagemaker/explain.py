"""What a SageMaker plan says about its decision: the lines ``plan --explain`` shows, and the warnings."""

from __future__ import annotations

import shlex

from cloudddp.backends.sagemaker.decide import TENSORBOARD_LOCAL, SageMakerDecision
from cloudddp.backends.sagemaker.images import is_official, support_warning
from cloudddp.code.shipped import snapshot_warnings
from cloudddp.injob import container_init
from cloudddp.injob.shim import SHIPPED_AS


def explain(d: SageMakerDecision) -> tuple[list[str], list[str]]:
    """The plan's decision lines and warnings, in the order plans have always listed them."""
    return [*_setup(d), *_running(d)], _warnings(d)


def _setup(d: SageMakerDecision) -> list[str]:
    """Where the files go, the size, the image and what the container gets before the script starts."""
    lines = []
    if d.storage.default_bucket:
        lines.append(f"bucket: the SageMaker default, s3://{d.storage.bucket} (account filled in at submit)")
    lines += d.size.decisions
    if d.launch.runner == "smddp" and d.launch.launcher == "torchrun":
        lines.append("smddp: the container's smddp launcher (MPI) starts the processes")
    lines.append(f"image {d.launch.image} ({d.launch.image_how})")
    lines.append(_entry_line(d))
    reqs = d.storage.requirements
    if reqs is not None:
        lines.append(
            f"requirements ({len(reqs.lines)} from {reqs.source}): the container installs the "
            "snapshot's requirements.txt before the script starts"
        )
    sku = d.size.sku
    if d.launch.presets and sku is not None:
        lines.append(f"{sku.fabric} presets: " + ", ".join(f"{k}={v}" for k, v in d.launch.presets.items()))
    return lines


def _entry_line(d: SageMakerDecision) -> str:
    """Which start applies: the DLC's entry (AWS's toolkit), or cloudddp's own on any other image."""
    if is_official(d.launch.image):
        return (
            "start: an official PyTorch DLC: cloudddp's init runs the image's entry (start_with_right_hostname.sh), "
            "whose training toolkit starts the processes"
        )
    return (
        "start: not an official PyTorch DLC: cloudddp's init runs the image's DLC entry if it has one, else "
        f"{container_init.START_AS} unpacks the code to /opt/ml/code, installs its requirements.txt and runs torchrun "
        "as the toolkit would (the image needs /bin/sh and Python 3 with torch; no bash, tar or toolkit)"
    )


def _stop_line(d: SageMakerDecision) -> str:
    """Who passes a stop to whom in the container, and the grace each rank gets (docs/sagemaker.md, "Stops")."""
    init = (
        f"the container's PID 1 is cloudddp's init ({container_init.SHIPPED_AS}; ContainerEntrypoint): "
        "it runs the image's entry (or, on an image without it, its own start)"
    )
    rank = (
        f"{SHIPPED_AS}, which the image's toolkit starts on each rank and which runs the job's program with the spec's "
        "exact arguments and environment, passes the stop to the program once (never to its DataLoader workers)"
    )
    if d.launch.runner in ("smddp", "mpi"):
        return (
            f"{init} and passes a stop's SIGTERM to each rank's {rank}; not through mpirun, which would pass it "
            f"on only after its kill timeout; SageMaker's SIGKILL comes {d.launch.grace} s after the SIGTERM"
        )
    return (
        f"{init} and passes a stop's SIGTERM to torchrun's agent only, which passes it to each rank's {rank}; "
        f"torchrun waits {d.launch.grace} s, the grace SageMaker gives, before it kills a rank"
    )


def _running(d: SageMakerDecision) -> list[str]:
    """How the processes start, and what SageMaker keeps, syncs, waits for and retries."""
    checkpoints = d.storage.checkpoint_uri
    argv = shlex.join(d.launch.payload["argv"])
    lines = [
        f"each process runs: {argv} (in the launcher's payload, cloudddp-NN, base64)",
        f"checkpoints in {checkpoints} ({d.storage.checkpoint_owner}): a resubmit finds its checkpoints there "
        "(not read at render)",
    ]
    if d.launch.unset_proto:
        lines.append(
            "NCCL_PROTO: the toolkit forces 'simple'; this image's aws-ofi-nccl (>= 1.6) picks the protocol "
            "itself, so the launcher removes it"
        )
    lines.append(_stop_line(d))
    lines += d.instances.volume_notes
    if d.instances.max_wait is not None:
        lines.append(
            f"managed spot: waits up to {d.instances.max_wait} s for capacity; checkpoints resume after interruptions"
        )
    if d.storage.tensorboard_uri is not None:
        lines.append(
            f"TensorBoard logs in {TENSORBOARD_LOCAL}, synced to {d.storage.tensorboard_uri} while the job runs"
        )
    if d.retries:
        lines.append(
            f"RetryStrategy: SageMaker restarts the job up to {d.retries} times only when "
            "it fails with InternalServerError (SageMaker's own fault), resuming from "
            f"{checkpoints}; a failing script is not retried (torchrun's --max-restarts stays the toolkit's 0)"
        )
    if d.storage.kms_key:
        lines.append("uploads (code, inputs) encrypted with sagemaker.output_kms_key (SSE-KMS)")
    return lines


def _warnings(d: SageMakerDecision) -> list[str]:
    warnings = list(d.size.warnings)
    sku, instance_type, gpus = d.size.sku, d.instances.instance_type, d.gpus_per_node
    if sku is not None and gpus and gpus != sku.gpus:
        warnings.append(
            f"{instance_type} has {sku.gpus} GPUs but resources.gpus_per_node is {gpus}: the request starts {gpus} "
            f"processes per host (sagemaker_mpi_num_of_processes_per_host), so {sku.gpus - gpus} GPUs are billed "
            f"and idle; set gpus_per_node: {sku.gpus} to use them all"
        )
    warnings += snapshot_warnings(d.storage.snapshot)
    warnings += d.launch.program_warnings
    if d.launch.runner != "torchrun" and not is_official(d.launch.image):
        warnings.append(
            f"{d.launch.image} is not an official PyTorch DLC: {d.launch.runner} starts only through the DLC's entry "
            f"and toolkit (mpirun); on an image without them {container_init.START_AS} refuses to start"
        )
    unpatched = support_warning(d.launch.image)
    if unpatched:
        warnings.append(unpatched)
    if d.launch.efa_dropped:
        warnings.append(
            f"{instance_type}: EC2 gives this size EFA, but SageMaker's training toolkit does not use it there "
            "(SM_EFA_NCCL_INSTANCES): no EFA settings, NCCL runs over TCP between the hosts"
        )
    return warnings
