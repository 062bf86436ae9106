"""The CreateTrainingJob request built from a :class:`~cloudddp.backends.sagemaker.decide.SageMakerDecision`: pure,
offline, and exactly what ``launch`` sends.

The SageMaker PyTorch containers run the SageMaker training toolkit, which starts the entry script
from these hyperparameters: ``sagemaker_program`` and ``sagemaker_submit_directory`` (the code
archive), plus ``sagemaker_torch_distributed_enabled`` (torchrun on every node) or
``sagemaker_distributed_dataparallel_enabled`` (smddp under MPI). Every other hyperparameter reaches
the script as ``--key value``; cloudddp's launcher (``_cloudddp_launch.py``) is that script, and it runs
the job's program with the exact argv carried in its ``cloudddp-NN`` hyperparameters.

What starts the container is cloudddp's own (``ContainerEntrypoint``, as the SDK v3's ModelTrainer does):
its init (``_cloudddp_init.py``, :mod:`cloudddp.injob.container_init`) is PID 1, runs the image's own entry
(``bash -m start_with_right_hostname.sh train``, which runs the toolkit) as its child where the image has it (the
DLCs), else cloudddp's own start (``_cloudddp_start.py``: torchrun, as the toolkit would start it), and passes a
stop's SIGTERM on to torchrun's agent, which passes it to each rank, or under Open MPI to each rank itself. The
image's own PID 1 forwards no signal. The entry needs only ``/bin/sh`` and Python 3 in the image.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

from cloudddp.backends.sagemaker.argsize import check_argument_size
from cloudddp.backends.sagemaker.decide import (
    CHECKPOINT_LOCAL,
    CODE_CHANNEL,
    TENSORBOARD_LOCAL,
    Channel,
    Instances,
    SageMakerDecision,
)
from cloudddp.backends.sagemaker.limits import LIMITS
from cloudddp.backends.sagemaker.limits import check as check_limits
from cloudddp.injob import container_init
from cloudddp.injob.shim import SHIPPED_AS
from cloudddp.injob.stack_requests import REQUEST_URI
from cloudddp.observe.metrics import STANDARD_METRICS, metric_regex
from cloudddp.plan import substitute
from cloudddp.runtime import RUN_ID

HYPERPARAMETER_VALUE_MAX = int(LIMITS["HyperParameters{value}"].max or 2500)
CODE_ARCHIVE = f"/opt/ml/input/data/{CODE_CHANNEL}/sourcedir.tar.gz"
# The PyTorch training images' ENTRYPOINT and SageMaker's argument (aws/deep-learning-containers,
# docker/pytorch/Dockerfile.cuda and the older pytorch/training Dockerfiles): what PID 1 runs as its child.
IMAGE_ENTRY = ["bash", "-m", "start_with_right_hostname.sh", "train"]
# PID 1: take the init out of the code channel's archive and run it as the container's init, with nothing but
# /bin/sh and Python 3 (no bash, no tar: a slim or NGC-based image may lack them). sh finds the interpreter and runs
# the Python line (its $0) with the archive and the image's entry; each string is at most 256 characters
# (TrainingContainerEntrypointString). The folder is a fresh one (mkdtemp), never a fixed name: two hosts sharing one
# /tmp (the container rehearsal runs them on one machine) once unpacked into the same folder at once and one failed.
ENTRY_SHELL = 'exec "$(command -v python3 || command -v python)" -c "$0" "$@"'
INIT_PYTHON = (
    "import os,sys,tarfile,tempfile;d=tempfile.mkdtemp(prefix='cloudddp-init.');f=d+'/{init}';"
    "open(f,'wb').write(tarfile.open(sys.argv[1]).extractfile('{init}').read());"
    "os.execv(sys.executable,[sys.executable,f]+sys.argv[2:])"
)
_NAME_OK = re.compile(r"[^a-zA-Z0-9-]")
CHARTED = (*STANDARD_METRICS, "loss", "epoch")
"""The metric lines' names SageMaker charts: the shared script's, and what the init template and README print."""


def encode(hyperparameters: dict[str, Any]) -> dict[str, str]:
    """Every value JSON-encoded, as the SageMaker SDK sends them: the toolkit JSON-decodes each value, so a
    raw ``0.10`` would reach the script as ``0.1`` and ``true`` as ``True``."""
    return {key: json.dumps(value) for key, value in hyperparameters.items()}


def shim_hyperparameters(payload: dict[str, Any]) -> dict[str, Any]:
    """The launcher's payload as ``cloudddp-NN`` hyperparameters: its JSON in standard base64, in parts
    short enough once JSON-encoded (base64 needs no escaping: each part is the limit less two quotes).

    The toolkit passes them to the shipped launcher as ``--cloudddp-NN <part>`` (keys sorted, hence the
    zero-padded numbers); the launcher joins the parts and runs the job's program with its exact argv.
    Base64, because ``sagemaker-training`` up to 5.1.2 (the one the AL2023 images pin) runs that command
    line through ``/bin/sh``, which would strip the quotes of raw JSON; base64 has no character it changes.
    """
    text = base64.b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode("ascii")
    size = HYPERPARAMETER_VALUE_MAX - 2
    return {f"cloudddp-{i:02d}": text[start : start + size] for i, start in enumerate(range(0, len(text), size))}


def shim_payload(hyperparameters: dict[str, str]) -> dict[str, Any]:
    """The launcher's payload back from a request's (JSON-encoded) ``cloudddp-NN`` hyperparameters."""
    parts = sorted(k for k in hyperparameters if k.startswith("cloudddp-"))
    text = "".join(json.loads(hyperparameters[k]) for k in parts)
    payload: dict[str, Any] = json.loads(base64.b64decode(text))
    return payload


def container_entrypoint() -> dict[str, list[str]]:
    """``ContainerEntrypoint`` and ``ContainerArguments``: cloudddp's init as PID 1, the image's entry as its child
    where the image has it (a DLC), else cloudddp's own start (:mod:`cloudddp.injob.container_start`)."""
    line = INIT_PYTHON.format(init=container_init.SHIPPED_AS)
    return {
        "ContainerEntrypoint": ["/bin/sh", "-c", ENTRY_SHELL, line, CODE_ARCHIVE],
        "ContainerArguments": IMAGE_ENTRY,
    }


def job_name(name: str, content: dict[str, Any], token: str) -> str:
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:8]
    base = _NAME_OK.sub("-", name)[: 63 - len(digest) - len(token) - 2].strip("-")
    return f"{base}-{digest}-{token}"


def build(d: SageMakerDecision, token: str) -> dict[str, Any]:
    """The request, named by its content and ``token``, with the job's name in place of every run id; checked
    against CreateTrainingJob's limits."""
    resource = resource_config(d.instances)
    hyper = hyperparameters(d)
    channels = [_channel(c) for c in d.storage.channels]
    content = {
        "resource": resource,
        "hyper": hyper,
        "image": d.launch.image,
        "env": d.launch.env,
        "channels": channels,
        "role": d.role,
    }
    name = job_name(d.name, content, token)
    hyper["sagemaker_job_name"] = name
    # The payload is base64: the job's name goes in before it is encoded (substitute cannot see inside).
    hyper = {k: v for k, v in hyper.items() if not k.startswith("cloudddp-")}
    hyper.update(shim_hyperparameters(substitute(d.launch.payload, {RUN_ID: name})))
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": d.role,
        "AlgorithmSpecification": algorithm_specification(d),
        "HyperParameters": encode(hyper),
        "ResourceConfig": resource,
        "OutputDataConfig": {
            "S3OutputPath": d.storage.output_uri,
            **({"KmsKeyId": d.storage.kms_key} if d.storage.kms_key else {}),
        },
        "CheckpointConfig": {"S3Uri": d.storage.checkpoint_uri, "LocalPath": CHECKPOINT_LOCAL},
        "StoppingCondition": stopping_condition(d.instances),
        "Environment": {**d.launch.env, REQUEST_URI: stacks_request(d.storage.output_uri, RUN_ID)},
        "EnableManagedSpotTraining": d.instances.spot,
        "EnableNetworkIsolation": d.network_isolation,
        "EnableInterContainerTrafficEncryption": d.encrypt_inter_container_traffic,
        "Tags": [{"Key": k, "Value": v} for k, v in {**d.tags, "cloudddp:request": name.rsplit("-", 2)[-2]}.items()],
    }
    if channels:
        request["InputDataConfig"] = channels
    if d.storage.tensorboard_uri is not None:  # synced to S3 while the job runs, so TensorBoard can follow it
        request["TensorBoardOutputConfig"] = {"S3OutputPath": d.storage.tensorboard_uri, "LocalPath": TENSORBOARD_LOCAL}
    if d.subnets:
        request["VpcConfig"] = {"Subnets": list(d.subnets), "SecurityGroupIds": list(d.security_group_ids)}
    if d.retries:
        request["RetryStrategy"] = {"MaximumRetryAttempts": d.retries}
    request = substitute(request, {RUN_ID: name})
    check_limits(request)
    check_argument_size(request)
    return request


def stacks_request(output_uri: str, job: str) -> str:
    """Where ``cloudddp stacks`` leaves its request for training job ``job`` (in-job stack_requests.py reads it with
    the job's role): beside the job's own output, under the output path."""
    return f"{output_uri.rstrip('/')}/{job}/cloudddp-stacks-request"


def algorithm_specification(d: SageMakerDecision) -> dict[str, Any]:
    """The image, cloudddp's init as its entry, and the metrics SageMaker reads from the job's lines."""
    return {
        "TrainingImage": d.launch.image,
        "TrainingInputMode": "File",
        **container_entrypoint(),
        # The metric lines' names, then what the job declares in its own words (which wins a name both have).
        "MetricDefinitions": [
            *({"Name": m, "Regex": metric_regex(m)} for m in CHARTED if m not in dict(d.metrics)),
            *({"Name": name, "Regex": regex} for name, regex in d.metrics),
        ],
        "EnableSageMakerMetricsTimeSeries": True,
    }


def hyperparameters(d: SageMakerDecision) -> dict[str, Any]:
    """What the toolkit reads (the program, the code archive, how to start the processes), and the launcher's
    payload as ``cloudddp-NN`` parts; not yet encoded."""
    hyper: dict[str, Any] = {
        **shim_hyperparameters(d.launch.payload),
        "sagemaker_program": SHIPPED_AS,
        "sagemaker_submit_directory": CODE_ARCHIVE,
        "sagemaker_region": d.region,
        "sagemaker_container_log_level": 20,
        # Read by every runner, torchrun included: without it a CPU instance gets one process.
        "sagemaker_mpi_num_of_processes_per_host": d.launch.processes,
    }
    if d.launch.runner == "smddp":
        hyper.update(
            {
                "sagemaker_distributed_dataparallel_enabled": True,
                "sagemaker_instance_type": d.instances.instance_type,
                "sagemaker_distributed_dataparallel_custom_mpi_options": "",
            }
        )
    elif d.launch.runner == "mpi":
        hyper["sagemaker_mpi_enabled"] = True
    else:
        hyper["sagemaker_torch_distributed_enabled"] = True
    return hyper


def resource_config(instances: Instances) -> dict[str, Any]:
    resource: dict[str, Any] = {
        "InstanceType": instances.instance_type,
        "InstanceCount": instances.count,
        "VolumeSizeInGB": instances.volume_gb,
    }
    if instances.keep_alive:
        resource["KeepAlivePeriodInSeconds"] = instances.keep_alive
    if instances.volume_kms_key:
        resource["VolumeKmsKeyId"] = instances.volume_kms_key
    return resource


def stopping_condition(instances: Instances) -> dict[str, Any]:
    stopping: dict[str, Any] = {"MaxRuntimeInSeconds": instances.max_runtime}
    if instances.max_wait is not None:
        stopping["MaxWaitTimeInSeconds"] = instances.max_wait
    return stopping


def _channel(channel: Channel) -> dict[str, Any]:
    return {
        "ChannelName": channel.name,
        "InputMode": channel.mode,
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": channel.uri,
                "S3DataDistributionType": "FullyReplicated",
            }
        },
    }
