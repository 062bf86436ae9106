"""The Azure ML CLI v2 command-job YAML and AmlCompute YAML of a decision: pure data, built with PyYAML.

These are the documents Azure ML users already know: ``az ml job create -f job.yml`` submits the job
document unchanged (``code`` is an absolute path, so it works wherever the file is saved), and
azure-ai-ml's own ``load_job`` / ``load_compute`` accept both (a test proves it for every Azure job).
They are made from an :class:`~cloudddp.backends.azureml.decide.AzureMLDecision` only (decide.py makes the
choices and their checks).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from typing import Any

from cloudddp.backends.azureml.decide import SSH_USER, AzureMLDecision, Cluster, Serverless
from cloudddp.code.snapshot import unpacked
from cloudddp.injob.shim import SHIPPED_AS
from cloudddp.plan import substitute
from cloudddp.runtime import RUN_ID

JOB_SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"
COMPUTE_SCHEMA = "https://azuremlschemas.azureedge.net/latest/amlCompute.schema.json"
_NAME_OK = re.compile(r"[^a-zA-Z0-9_-]")


def documents(decision: AzureMLDecision, token: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The job document and the compute document (None for serverless compute: there is no cluster); the job
    is named after both (:func:`job_name`), and the run id in its values is that name."""
    on = decision.compute
    job, compute = _job(decision), (_compute(on) if isinstance(on, Cluster) else None)
    name = job_name(decision.name, {"job": job, "compute": compute}, token)
    job = substitute({"$schema": job.pop("$schema"), "name": name, **job}, {RUN_ID: name})
    return job, compute


def to_yaml(data: dict[str, Any]) -> str:
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter when PyYAML has it: ~5× faster
    return yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


def job_name(name: str, content: dict[str, Any], token: str) -> str:
    """The job's name, lower-case: azure-ai-ml's ``load_job`` lower-cases a job name before submitting it, so a
    mixed-case name would not be the name (nor the MLflow run id) the job gets."""
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:8]
    base = _NAME_OK.sub("-", name)[:200].strip("-_")
    return f"{base}-{digest}-{token}".lower()


def _job(d: AzureMLDecision) -> dict[str, Any]:
    job: dict[str, Any] = {
        "$schema": JOB_SCHEMA,
        "type": "command",
        "display_name": d.name,
        "experiment_name": d.experiment,
        "code": str(unpacked(d.snapshot.path)),
        "command": command(d),
        "environment": d.environment_value,
        **_where(d),
        "environment_variables": d.env,
        "limits": {"timeout": d.timeout},
        "tags": d.tags,
    }
    if d.description:
        job["description"] = d.description
    if d.identity:
        job["identity"] = {"type": "user_identity" if d.identity == "user" else "managed"}
    if d.inputs:
        job["inputs"] = d.inputs
    job["outputs"] = _outputs(d)
    return job


def _where(d: AzureMLDecision) -> dict[str, Any]:
    """Where the job runs: ``compute: azureml:<cluster>``, or serverless compute's ``resources.instance_type`` and
    ``queue_settings.job_tier`` (what azure-ai-ml's ``command(instance_type=, queue_settings=)`` sends)."""
    where: dict[str, Any] = {}
    if isinstance(d.compute, Cluster):
        where["compute"] = f"azureml:{d.compute.name}"
    where["distribution"] = _distribution(d)
    where["resources"] = {"instance_count": d.nodes, "shm_size": d.shm_size}
    if isinstance(d.compute, Serverless):
        where["resources"] = {"instance_type": d.compute.instance_type, **where["resources"]}
        where["queue_settings"] = {"job_tier": d.compute.job_tier}
    return where


_BINDING = re.compile(r"\$\{\{[A-Za-z0-9_.]+\}\}")
"""An Azure ML binding in a command (``${{inputs.data}}``, ``${{outputs.model}}``): Azure ML replaces it."""


def command(d: AzureMLDecision) -> str:
    """The shell command Azure ML runs on each process. Variables whose value is an Azure ML binding
    (``${{outputs.model}}``) are set in front of it, because only the command is resolved by Azure ML;
    ${{...}} references are left unquoted, every other character is shlex-quoted (the text around a reference
    too). The program runs under the shipped launcher."""
    program = ["python", *d.program.argv] if d.program.python else list(d.program.argv)
    payload = json.dumps(d.launcher, separators=(",", ":"))
    program = ["python", SHIPPED_AS, "--cloudddp-00", payload, "--", *program]
    quoted = [quote_around_bindings(a) for a in program]
    return " ".join([f"{k}={quote_around_bindings(v)}" for k, v in d.bindings.items()] + quoted)


def quote_around_bindings(text: str) -> str:
    """``text`` for the shell, its ``${{...}}`` references left for Azure ML to replace and every other character
    shlex-quoted: ``${{outputs.model}}/my results; touch x`` is one argument, not a second command."""
    parts: list[str] = []
    at = 0
    for binding in _BINDING.finditer(text):
        if binding.start() > at:
            parts.append(shlex.quote(text[at : binding.start()]))
        parts.append(binding.group())
        at = binding.end()
    if at < len(text) or not parts:
        parts.append(shlex.quote(text[at:]))
    return "".join(parts)


def _distribution(d: AzureMLDecision) -> dict[str, Any]:
    """The job's distribution: the two keys both types have (azure-ai-ml would drop any other silently)."""
    return {"type": d.distribution, "process_count_per_instance": d.processes}


def _outputs(d: AzureMLDecision) -> dict[str, Any]:
    outputs: dict[str, Any] = {}
    for name, path in d.outputs.items():
        outputs[name] = {"type": "uri_folder", "mode": "rw_mount"}
        if path:
            outputs[name]["path"] = path
    if d.checkpoints is not None:
        outputs["checkpoints"] = {"type": "uri_folder", "mode": "rw_mount", "path": d.checkpoints}
    return outputs


def _compute(cluster: Cluster) -> dict[str, Any]:
    compute: dict[str, Any] = {
        "$schema": COMPUTE_SCHEMA,
        "name": cluster.name,
        "type": "amlcompute",
        "size": cluster.size,
        "min_instances": cluster.min_instances,
        "max_instances": cluster.max_instances,
        "idle_time_before_scale_down": cluster.idle_s,
        "tier": cluster.tier,
        "ssh_public_access_enabled": cluster.ssh_public_key is not None,
    }
    if cluster.subnet is not None:
        compute["network_settings"] = {"subnet": cluster.subnet}
    if not cluster.node_public_ip:
        compute["enable_node_public_ip"] = False
    if cluster.identity is not None:
        compute["identity"] = (
            {"type": "system_assigned"}
            if cluster.identity == "system"
            else {"type": "user_assigned", "user_assigned_identities": [{"resource_id": cluster.identity}]}
        )
    if cluster.ssh_public_key is not None:
        compute["ssh_settings"] = {"admin_username": SSH_USER, "ssh_key_value": cluster.ssh_public_key}
    return compute
