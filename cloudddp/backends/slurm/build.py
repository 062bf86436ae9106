"""A Slurm plan's request and its sbatch script, made from the render's decision alone."""

from __future__ import annotations

from cloudddp.backends.slurm import flags
from cloudddp.backends.slurm.decide import SlurmDecision
from cloudddp.backends.slurm.request import CpusAtSubmit, LoginEnvironment, SlurmRequest
from cloudddp.backends.slurm.script import render_script


def build(decision: SlurmDecision) -> tuple[SlurmRequest, dict[str, str]]:
    """The request and the plan's documents (the sbatch script, as sbatch gets it)."""
    return request(decision), {"job.sbatch": render_script(decision)}


def request(decision: SlurmDecision) -> SlurmRequest:
    """What launch needs besides the script."""
    d, layout, places = decision, decision.layout, decision.places
    return SlurmRequest(
        run_id=d.run_id,
        script_path=layout.script,
        sbatch=("sbatch", "--parsable", layout.script),
        workdir=layout.workdir,
        run_dir=layout.run_dir,
        code_dir=layout.code_dir,
        folders=(
            f"{layout.run_dir}/logs",
            places.model_dir,
            *filter(None, [places.checkpoint_dir, places.tensorboard_dir]),
        ),
        batch_log=layout.batch_log,
        node_logs=tuple(layout.node_log(i) for i in range(d.nodes)),
        nodes=d.nodes,
        processes_per_node=d.processes_per_node,
        launch=d.launch,
        kill_wait=d.options.kill_wait,
        env=d.env,
        env_from_submit=d.env_from_submit,
        status_every=d.options.status_every,
        environment=_login_environment(decision),
        cpus_at_submit=(
            None
            if d.cpus_per_process
            else CpusAtSubmit(partition=d.options.partition, gpus_per_node=d.gpus_per_node, per_task=d.per_task)
        ),
        checkpoint_dir=places.checkpoint_dir,
        arguments=d.arguments,
        clusters=flags.clusters(d.options.sbatch_options),
    )


def _login_environment(decision: SlurmDecision) -> LoginEnvironment | None:
    """The requirements environment launch builds where Slurm's commands run (slurm.install_on: login)."""
    opts = decision.options
    if not decision.requirements_env or opts.install_on != "login":
        return None
    return LoginEnvironment(
        folder=decision.requirements_env,
        key=decision.env_key,
        python=opts.python,
        modules=tuple(opts.modules),
        setup=tuple(opts.setup),
    )
