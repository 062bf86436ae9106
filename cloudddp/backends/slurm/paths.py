"""Where a job's inputs, outputs and checkpoints are on the cluster's filesystem, from the spec's paths.

Every node must read them, so a path is absolute as given; a relative one is read from the spec file's folder
only when this machine is the login node (through ssh, this machine's folders mean nothing on the cluster).
"""

from __future__ import annotations

from cloudddp.backends.slurm.layout import Layout
from cloudddp.backends.slurm.options import SlurmOptions
from cloudddp.errors import UserError
from cloudddp.runtime import Places, checkpoint_folder
from cloudddp.spec.model import JobSpec


def places(spec: JobSpec, opts: SlurmOptions, layout: Layout) -> Places:
    """Where the job's model, TensorBoard logs, checkpoints and inputs are on the cluster."""
    return Places(
        model_dir=output_dir(spec, opts, "model", layout.model_dir) or layout.model_dir,
        nodes=spec.resources.nodes,
        processes_per_node=spec.resources.processes,
        tensorboard_dir=output_dir(spec, opts, "tensorboard", f"{layout.run_dir}/tensorboard"),
        checkpoint_dir=checkpoints(spec, opts, layout),
        inputs={name: input_path(spec, opts, name) for name in spec.inputs},
    )


def cluster_path(spec: JobSpec, opts: SlurmOptions, where: str, field: str) -> str:
    """A path the job uses: absolute as given; relative to the spec file when this machine is the login node."""
    if "://" in where:
        raise UserError(
            f"{field}: {where} is not on the cluster's filesystem",
            hint="give a path every node can read (a shared filesystem)",
        )
    if where.startswith("/"):
        return where
    if opts.login_host:
        raise UserError(
            f"{field}: {where} is relative, and the cluster is reached through ssh",
            hint="give an absolute path on the cluster's shared filesystem",
        )
    return str((spec.base_dir / where).resolve())


def input_path(spec: JobSpec, opts: SlurmOptions, name: str) -> str:
    item = spec.inputs[name]
    field = f"inputs.{name}.at.slurm" if "slurm" in item.at else f"inputs.{name}.path"
    return cluster_path(spec, opts, spec.input_location(name, "slurm"), field)


def output_dir(spec: JobSpec, opts: SlurmOptions, name: str, default: str) -> str | None:
    """Where output ``name`` goes: its path on the cluster, else ``default`` (None: TensorBoard not declared)."""
    output = spec.outputs.get(name)
    if output is None and name != "model":
        return None
    if output is None or output.path is None:
        return default
    return cluster_path(spec, opts, output.path, f"outputs.{name}.path")


def checkpoints(spec: JobSpec, opts: SlurmOptions, layout: Layout) -> str | None:
    if not spec.checkpoint.enabled:
        return None
    folder = checkpoint_folder(spec, f"{layout.workdir}/checkpoints")
    return cluster_path(spec, opts, folder, "checkpoint.path") if spec.checkpoint.path else folder
