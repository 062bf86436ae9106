"""The sbatch script of a job: ``#SBATCH`` lines, the environment, one ``srun`` that starts the training.

Pure text from decided values (no spec, no cluster): what ``cloudddp render -b slurm`` prints is what
``sbatch`` gets. How it behaves on Slurm 22.05 (tests/support/SLURM.md):

- node names need not resolve as host names, so the rendezvous address is the first node's ``NodeAddr``
  (``scontrol show node``), and each torchrun agent announces its own node's address (``--local-addr``);
- cancel, requeue, preemption and the time limit send SIGTERM to every process of the job step (slurmstepd
  signals them all: each rank, torchrun's agent, a rank's DataLoader workers), and SIGKILL KillWait (for a
  preemption GraceTime) seconds later; this script keeps waiting for srun meanwhile, so the training can
  checkpoint. Each rank runs under cloudddp's launcher (``stops: platform``: it passes nothing on, so a rank
  hears Slurm's SIGTERM once; torchrun's ``killpg`` reaches only the launcher); the launcher also keeps
  ``checkpoint.files``. torchrun's agent exits 1 on SIGTERM: the node's wrapper exits 0 after a stop, so that
  ``srun --kill-on-bad-exit`` does not kill rank 0 on another node while it saves;
- ``--signal=B:USR1@<lead>`` reaches only this script, ``lead`` seconds before the time limit: it asks the
  training to stop (``scancel --signal=TERM``, which reaches the tasks directly; srun itself would kill
  them on SIGTERM) and exits 124, so the run reads as stopped by ``limits.max_runtime``;
- a requeued job runs this script again from the top with ``SLURM_RESTART_COUNT`` set; logs are appended
  (``--open-mode=append``) and the training resumes from its checkpoint folder; its steps are numbered from 0
  again, so the training first takes ``SLURM_RESTART_COUNT`` empty steps (:data:`FRESH_STEP_LINES`): a signal
  slurmctld still delivers to an earlier run's training step finds a finished empty step;
- preemption with a grace time (``GraceTime>0``) sends SIGTERM to the training only and requeues the job
  GraceTime seconds later: a training that checkpoints sooner would end the job (as succeeded, or as its own
  failure). So once the training has ended, this script asks Slurm whether the job was selected for
  preemption (``PreemptTime`` in ``scontrol show job``; a requeue resets it) and requeues it itself, unless
  Slurm is ending the job (a scancel during the grace: SIGTERM reached this script, the job is not RUNNING);
- a ``limits.max_runtime`` longer than the partition's time limit (``slurm.partition_time_limit``) runs as a
  chain of allocations: at each one's warning signal the training checkpoints and the script requeues the
  job; the seconds used so far are kept in the run folder, and the last allocation stops at the budget;
- where node data is private (``PrivateData=nodes``), ``scontrol show node`` is refused to users: the
  rendezvous host is then this script's own host (it runs on the job's first node, where the rendezvous is).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from cloudddp.backends.slurm import envs, images, rendezvous
from cloudddp.backends.slurm.decide import SlurmDecision
from cloudddp.injob.shim import SHIPPED_AS as LAUNCHER

LIMIT_EXIT = 124
"""The script's exit code when it stopped the training ahead of the time limit."""
START_MARK = "cloudddp: run "
LIMIT_MARK = "cloudddp: the time limit (limits.max_runtime) is"
PREEMPTED_EXIT = 75
"""The script's exit code when the job was preempted and cannot be requeued (EX_TEMPFAIL: try again later)."""
PREEMPT_MARK = "cloudddp: preempted"
CHAIN_MARK = "cloudddp: the time limit of this allocation"
REQUEUE_MARK = "cloudddp: requeueing Slurm job"
CANCEL_MARK = "cloudddp: Slurm is ending this job (a cancel, its time limit, its own requeue): not requeued"
STOPPED_NODE_MARK = "cloudddp: torchrun on node"
SAVED_MARK = "cloudddp: the training wrote to its checkpoint folder in this run"
UNSAVED_MARK = "cloudddp: nothing was written to the checkpoint folder in this run"
ENDED_FILE = ".cloudddp-ended"
"""In the run folder: ``exit=N restarts=N slurm=STATE end=TIME`` of a run's last end (status reads it when Slurm
has forgotten the job)."""


RDZV_ID_VARIABLE = "PET_RDZV_ID"
"""torchrun's environment name for ``--rdzv-id``."""


def sbatch_lines(d: SlurmDecision) -> list[str]:
    """The ``#SBATCH`` options, in the order a person reads them."""
    opts = d.options
    per_node_tasks = d.processes_per_node if d.launch == "srun" else 1
    lines = [f"--job-name={d.run_id}", f"--nodes={d.nodes}", f"--ntasks-per-node={per_node_tasks}"]
    if d.cpus_per_task:
        lines.append(f"--cpus-per-task={d.cpus_per_task}")
    if d.gpus_per_node:
        gpus = f"{opts.gpu_type}:{d.gpus_per_node}" if opts.gpu_type else str(d.gpus_per_node)
        lines.append(f"--gpus-per-node={gpus}" if opts.gpu_option == "gpus-per-node" else f"--gres=gpu:{gpus}")
    if opts.mem is not None:
        lines.append(f"--mem={opts.mem}")
    lines += [
        f"--time={_duration(d.time_minutes)}",
        f"--signal=B:USR1@{d.stop_lead}",
        "--requeue" if opts.requeue else "--no-requeue",
    ]
    for name, value in (
        ("partition", opts.partition),
        ("account", opts.account),
        ("qos", opts.qos),
        ("constraint", opts.constraint),
    ):
        if value:
            lines.append(f"--{name}={value}")
    if opts.exclusive:
        lines.append("--exclusive")
    lines += [
        f"--output={d.layout.batch_log}",
        "--open-mode=append",
        f"--chdir={d.layout.code_dir}",
        "--export=ALL",
        *opts.sbatch_options,
    ]
    return lines


def render_script(d: SlurmDecision) -> str:
    """The script, as sbatch gets it."""
    q, opts = shlex.quote, d.options
    out = [
        "#!/bin/bash",
        f"# cloudddp job {d.job_name}, run {d.run_id}: `cloudddp submit` sends this file to sbatch unchanged.",
    ]
    out += [f"#SBATCH {line}" for line in sbatch_lines(d)]
    out += ["", "set -e  # a failing module load or setup line ends the job here, with its message in batch.log"]
    out += _ended_lines(d)
    out += _module_lines(opts.modules)
    out += list(opts.setup)
    if d.requirements_env:
        out += _requirements_lines(d)
    if opts.container is not None:
        out += images.import_lines(opts.container, d.layout.workdir)
    out += ["", "# The job's environment: the spec's env, then the runtime contract (cloudddp/runtime.py)."]
    out += [f"export {name}={q(value)}" for name, value in d.env.items() if name not in d.env_from_submit]
    out += [
        f"# {name}: from the submitting shell or a secret; sbatch's environment carries it, never this file"
        for name in d.env_from_submit
    ]
    if d.launch == "torchrun":
        out += [
            f"# {RDZV_ID_VARIABLE}: the rendezvous id, 128 random bits made at submit; sbatch's environment carries it",
            "# (torchrun reads it there), never an argv: with it in `ps` anyone who reaches the port could join",
            f': "${{{RDZV_ID_VARIABLE}:?no rendezvous id: sbatch is given one by cloudddp submit}}"',
        ]
    out += [
        "set +e",
        "",
        f'echo "{START_MARK}${{SLURM_RESTART_COUNT:-0}} of Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST '
        '($(date -u +%FT%TZ))"',
        "# Node names need not resolve: each node's address is the NodeAddr Slurm knows (name=address pairs).",
        "# Where node data is private (PrivateData=nodes) scontrol refuses it: then the rendezvous host is this",
        "# script's host, the job's first node (Slurm runs the batch script there), and each node names its own.",
        'nodes=$(scontrol -o show node "$SLURM_JOB_NODELIST" 2>/dev/null \\',
        "  | sed -E 's/^NodeName=([^ ]+) .* NodeAddr=([^ ]+) .*/\\1=\\2/')",
        'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "rdzv_host=$(hostname)",
        'for pair in $nodes; do [ "${pair%%=*}" = "$first" ] && rdzv_host=${pair#*=}; done',
        *rendezvous.endpoint_lines(d, d.layout.run_dir),
        "",
        *_stop_lines(d),
        f'began_mark={shlex.quote(d.layout.run_dir)}/.cloudddp-run-began; touch "$began_mark"',
        *FRESH_STEP_LINES,
        "",
    ]
    out += _launch_lines(d)
    out += [
        "training=$!",
        'wait "$training"; code=$?',
        'while kill -0 "$training" 2>/dev/null; do wait "$training"; code=$?; done',
        *rendezvous.taken_lines(d, opts),
        *_end_lines(d),
    ]
    return "\n".join(out) + "\n"


FRESH_STEP_LINES = (
    "# A requeued run numbers its job steps from 0 again, and slurmctld may still deliver an earlier run's step",
    "# signal to the step of that id (a SIGTERM that timed out on a node during a preemption is retried): each run",
    "# first takes as many empty steps as it has restarts, so its training is a step no earlier run's training was.",
    'for _ in $(seq "${SLURM_RESTART_COUNT:-0}"); do srun --nodes=1 --ntasks=1 --overlap --quiet true || break; done',
)
"""Each run's training step gets an id no earlier run's step had, so a stale signal finds an empty step."""


def _ended_lines(d: SlurmDecision) -> list[str]:
    """The run's end, kept in the run folder for when Slurm has forgotten the job (MinJobAge, and no accounting
    the user may read): its exit code, its restarts and what Slurm was doing; a run that requeues itself records
    nothing (it goes on)."""
    return [
        "# How this run ended, for cloudddp status once Slurm has forgotten the job (no accounting to ask).",
        f'ended_file={shlex.quote(d.layout.run_dir)}/{ENDED_FILE}; rm -f "$ended_file"; requeued=0 state=',
        'trap \'ended=$?; [ "$requeued" = 1 ] || { echo "exit=$ended restarts=${SLURM_RESTART_COUNT:-0} '
        'slurm=${state:-RUNNING} end=$(date -u +%FT%T%z)" > "$ended_file"; } 2>/dev/null || true; exit "$ended"\' EXIT',
    ]


def _module_lines(modules: Sequence[str]) -> list[str]:
    """``module load`` each module, after making sure ``module`` exists: a non-login ``#!/bin/bash`` (sbatch's,
    or one reached over ssh) often lacks it, so the module system's own init is sourced when it is missing."""
    if not modules:
        return []
    return [
        "# `module` comes from a login shell's profile, and this script is not one: where it is missing, source",
        "# the module system's own init (Lmod's or Environment Modules', where each installs it).",
        "if ! type module >/dev/null 2>&1; then",
        '  for init in "${LMOD_PKG:+$LMOD_PKG/init/bash}" "${MODULESHOME:+$MODULESHOME/init/bash}" \\',
        "      /etc/profile.d/lmod.sh /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash \\",
        "      /usr/share/modules/init/bash; do",
        '    [ -n "$init" ] && [ -f "$init" ] && { . "$init"; break; }',
        "  done",
        "fi",
        'type module >/dev/null 2>&1 || { echo "cloudddp: slurm.modules is set, but this node has no module command"'
        ' "(no Lmod or Environment Modules init found): load them in slurm.setup instead" >&2; exit 2; }',
        *[f"module load {shlex.quote(module)}" for module in modules],
    ]


def _stop_lines(d: SlurmDecision) -> list[str]:
    """What this script does on SIGTERM, and on the warning signal (USR1) before the allocation's time limit."""
    ask = 'scancel --signal=TERM "$SLURM_JOB_ID"'
    limit = f"{LIMIT_MARK} {d.stop_lead} s away: asking the training to checkpoint and stop"
    preempt = f"{PREEMPT_MARK}: the warning signal came with a preemption (PreemptParameters=send_user_signal)"
    lines = [
        "# SIGTERM (cancel, requeue, preemption, the time limit) reaches the training processes from Slurm itself;",
        "# this script waits for them to checkpoint. USR1 comes from --signal above, before the time limit, or at",
        "# a preemption where the cluster sends it then (send_user_signal): the job's record tells which.",
        "stopped=0 chained=0 terminated=0",
        'preempting() { local i; i=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null); '
        '[[ $i == *" PreemptTime="* && $i != *" PreemptTime=None "* ]]; }',
    ]
    if d.budget_seconds is None:
        return [
            *lines,
            "trap 'terminated=1; echo \"cloudddp: SIGTERM: the training checkpoints and stops\"' TERM",
            f'trap \'if preempting; then echo "{preempt}"; else stopped=1; echo "{limit}"; fi; {ask}\' USR1',
        ]
    chain = (
        f"{CHAIN_MARK} is $lead s away: the training checkpoints, then the job is requeued for the rest of "
        "limits.max_runtime"
    )
    return [
        *lines,
        f"# limits.max_runtime ({d.budget_seconds} s) is longer than one allocation ({d.time_minutes * 60} s,",
        "# slurm.partition_time_limit): the job runs as a chain of allocations, each requeued by this script at",
        "# its warning signal; the seconds used so far are kept in the run folder.",
        f"budget={d.budget_seconds} link={d.time_minutes * 60} lead={d.stop_lead}",
        f"used_file={shlex.quote(d.layout.run_dir)}/.cloudddp-used-seconds",
        'used=$(cat "$used_file" 2>/dev/null || echo 0); began=$SECONDS',
        'account() { echo $(( used + SECONDS - began )) > "$used_file"; }',
        "left=$(( budget - used )) final=0 timer=",
        'echo "cloudddp: $used s of limits.max_runtime ($budget s) used by earlier allocations"',
        'if [ "$left" -le "$lead" ]; then',
        f'  echo "{LIMIT_MARK} spent by earlier allocations: the training does not start again"; exit {LIMIT_EXIT}',
        "fi",
        "trap 'terminated=1; account; echo \"cloudddp: SIGTERM: the training checkpoints and stops\"' TERM",
        f'trap \'if preempting; then echo "{preempt}"; elif [ "$final" = 1 ]; then stopped=1; echo "{limit}"; '
        f'else chained=1; echo "{chain}"; fi; {ask}\' USR1',
        'if [ "$left" -le "$link" ]; then',
        "  # The last allocation: limits.max_runtime ends before Slurm's limit does; a timer gives the warning.",
        '  final=1; (sleep $(( left - lead )); kill -USR1 "$$") & timer=$!',
        "fi",
    ]


def _end_lines(d: SlurmDecision) -> list[str]:
    """After the training: requeue a preempted job (and a chain's next allocation) unless it was cancelled, else
    exit with its code (the time limit's, once it has said whether the training checkpointed)."""
    lines = [
        "# Preempted with a grace time: Slurm sent SIGTERM to the training only and would requeue the job GraceTime",
        "# seconds later; the training has checkpointed and ended sooner, so requeue it now (as submitit does).",
        "# A job Slurm is ending (scancel during the grace: this script got SIGTERM, and the job is COMPLETING, not",
        "# RUNNING) is never requeued: scontrol would accept it.",
        'info=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null); state=${info#* JobState=}; state=${state%% *}',
        'preempted() { [[ $info == *" PreemptTime="* && $info != *" PreemptTime=None "* ]]; }',
    ]
    if d.budget_seconds is not None:
        lines += ['[ -n "$timer" ] && kill "$timer" 2>/dev/null', "account"]
    lines.append(
        f'if [ "$terminated" = 1 ] || [ "$state" != RUNNING ]; then echo "{CANCEL_MARK} (JobState=$state)"; '
        'exit "$code"; fi'
    )
    if d.options.requeue:
        lines += [
            "requeue() {",
            f'  echo "{REQUEUE_MARK} $SLURM_JOB_ID after $1 ($(date -u +%FT%TZ))"',
            "  # The requeue's own SIGTERM reaches this script and scontrol too: ignored, it cannot turn a requeue",
            "  # that happened into a failed scontrol.",
            "  trap '' TERM",
            '  scontrol requeue "$SLURM_JOB_ID" && { requeued=1; exit 0; }',
            f'  echo "cloudddp: scontrol requeue failed: the job ends here" >&2; exit {PREEMPTED_EXIT}',
            "}",
            f'preempted && {{ echo "{PREEMPT_MARK}: Slurm selected this job for preemption"; requeue preemption; }}',
        ]
        if d.budget_seconds is not None:
            lines.append('[ "$chained" = 1 ] && requeue "the time limit of this allocation"')
    else:
        lines.append(
            f'preempted && {{ echo "{PREEMPT_MARK}, and slurm.requeue is off: the job ends here" >&2; '
            f"exit {PREEMPTED_EXIT}; }}"
        )
    return [
        *lines,
        "# Stopped ahead of the time limit: say whether the training checkpointed (status tells it on).",
        'if [ "$stopped" = 1 ]; then',
        '  if [ -n "${CLOUDDDP_CHECKPOINT_DIR:-}" ] && [ -n "$(find "$CLOUDDDP_CHECKPOINT_DIR" -type f -newer '
        '"$began_mark" -print -quit 2>/dev/null)" ]; then',
        f'    echo "{SAVED_MARK}"',
        f'  elif [ -n "${{CLOUDDDP_CHECKPOINT_DIR:-}}" ]; then echo "{UNSAVED_MARK}"; fi',
        f"  exit {LIMIT_EXIT}",
        "fi",
        'exit "$code"',
    ]


def _requirements_lines(d: SlurmDecision) -> list[str]:
    env, opts = d.requirements_env or "", d.options
    built_at_submit = opts.install_on == "login"
    return [
        "",
        "# The job's requirements (requirements.txt in the code), in an environment on the shared filesystem keyed",
        f"# on slurm.python, the modules, the setup lines and the list; it sees {opts.python}'s own packages after",
        "# its own (torch is not installed twice), and is used only while its recorded sha256 matches.",
        *envs.FUNCTIONS.splitlines(),
        envs.call(env, opts.python, d.env_key, "check" if built_at_submit else "build") + " || exit 1",
        f'export PATH={shlex.quote(env)}/bin:"$PATH"  # `python` in code.command is this environment\'s too',
    ]


def _launch_lines(d: SlurmDecision) -> list[str]:
    q, opts, python = shlex.quote, d.options, d.python
    program = [python, LAUNCHER, "--cloudddp-00", launcher_payload(d), "--"]
    program += [python, *d.program.argv] if d.program.python else list(d.program.argv)
    if d.launch == "torchrun":
        body = [
            "# Each training process first says its global rank (torchrun's output prefix is the local rank).",
            'announce=\'echo "cloudddp: rank $RANK of $WORLD_SIZE (local rank $LOCAL_RANK)"; exec "$@"\'',
            "# One torchrun agent per node: $1 the rendezvous host, $2 the nodes' addresses, $3 the announcement,",
            "# $4 the agent's wrapper, $5 the file where node 0 writes the rendezvous' address, then the program.",
            "# Slurm's SIGTERM reaches every process of the step, the agent too, which then exits 1: a node stopped",
            "# on request exits 0 instead, so that srun --kill-on-bad-exit does not kill the other nodes' ranks",
            "# while rank 0 saves; a crash still ends the whole job at once.",
            "per_node='",
            "addr=$(hostname)  # its NodeAddr below, where node data is readable",
            'for pair in $2; do [ "${pair%%=*}" = "$SLURMD_NODENAME" ] && addr=${pair#*=}; done',
            "rdzv=$1; announce=$3; wrapper=$4; rdzv_file=$5; shift 5",
            'stopped=0; trap "stopped=1" TERM',
            f'{q(python)} -c "$wrapper" "$rdzv_file" "$rdzv" {opts.rendezvous_port or 0} \\',
            f'  --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node={d.processes_per_node} \\',
            "  --rdzv-backend=c10d --rdzv-conf=is_host=$(( SLURM_NODEID == 0 )) \\",
            f'  --local-addr="$addr" --max-restarts={d.max_restarts} --tee=3 '
            '--no-python bash -c "$announce" cloudddp-rank "$@" &',
            'agent=$!; wait "$agent"; code=$?',
            'while kill -0 "$agent" 2>/dev/null; do wait "$agent"; code=$?; done',
            'if [ "$stopped" = 1 ] && [ "$code" != 0 ]; then',
            f'  echo "{STOPPED_NODE_MARK} $SLURMD_NODENAME ended $code after the stop: read as stopped"; code=0',
            "fi",
            'exit "$code"',
            "'",
        ]
        tasks, label, name = 1, [], "cloudddp-node"
        extra = ['"$rdzv_host"', '"$nodes"', '"$announce"', '"$rdzv_wrapper"', '"$rdzv_file"']
    else:
        body = rendezvous.task_lines(d, opts, python)
        tasks, label, name = d.processes_per_node, ["--label"], "cloudddp-task"
        extra = ['"$rdzv_host"', '"$nodes"', '"$rdzv_wrapper"', '"$rdzv_file"']
    # srun is told the CPUs of each task: Slurm 22.05 and later no longer read SLURM_CPUS_PER_TASK in srun.
    cpus = str(d.cpus_per_task) if d.cpus_per_task else "$SLURM_CPUS_PER_TASK"
    srun = [
        "srun",
        "--export=ALL",
        f"--ntasks-per-node={tasks}",
        f"--cpus-per-task={cpus}",
        "--kill-on-bad-exit=1",
        *label,
        f"--output={d.layout.node_log('%n')}",
        "--open-mode=append",
    ]
    inner = ["bash", "-c", '"$per_node"', name, *extra]
    container = opts.container
    if container is not None:
        image = d.image or ""
        # The host folders a container sees: the working folder, the inputs, then slurm.container.mounts.
        mounts = ",".join([d.layout.workdir, *sorted(set(d.places.inputs.values())), *container.mounts])
        if container.runtime == "pyxis":
            srun += [
                f"--container-image={image}",
                f"--container-mounts={mounts}",
                f"--container-workdir={d.layout.code_dir}",
            ]
        else:
            gpu = ["--nv"] if d.gpus_per_node else []
            inner = ["apptainer", "exec", *gpu, f"--bind={mounts}", f"--pwd={d.layout.code_dir}", image, *inner]
    words = [f'"{w}"' if "$" in w else q(w) for w in srun]  # $SLURM_CPUS_PER_TASK, expanded by bash
    words += [w if w.startswith('"') else q(w) for w in inner] + [q(w) for w in program]
    return [*body, _wrap(words) + " &"]


def launcher_payload(d: SlurmDecision) -> str:
    """What each rank's launcher (cloudddp/injob/shim.py) is told: Slurm signals every process of the step itself,
    so the launcher passes nothing on (``stops: platform``); it keeps ``checkpoint.files`` (the first launcher of
    each node keeps a file within about a second of its save, and each when its program ends, inside the grace)."""
    payload: dict[str, object] = {"stops": "platform"}
    if d.keep_files:
        payload["keep"] = list(d.keep_files)
    return json.dumps(payload, separators=(",", ":"))


def _wrap(words: list[str], width: int = 110) -> str:
    """Shell words joined, continued over lines with backslashes near ``width`` characters."""
    lines, current = [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > width:
            lines.append(current + " \\")
            current = "  " + word
        else:
            current = f"{current} {word}" if current else word
    return "\n".join([*lines, current])


def _duration(minutes: int) -> str:
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"
