"""Recovery without anyone watching: a run ended by preemption, lost capacity or an infrastructure fault is
submitted again — same job, same code, same checkpoint folder — until it succeeds or the budget is spent.

A *chain* is the attempts of one recovered job. It is kept in ``$CLOUDDDP_HOME/chains/<first run id>.json``
and watched by a detached process (``python -m cloudddp.runs.recovery <chain id>``), so the terminal that
submitted the job can close. The watcher polls the newest attempt's status; when it failed for a reason
the job did not cause (:attr:`~cloudddp.backends.base.Cause.recoverable`), it launches the next attempt
(the backend renames what must differ, :meth:`~cloudddp.backends.base.Backend.for_attempt`); a failure of
the job's own code is never retried. The script resumes from its checkpoint, because every attempt has
the same checkpoint folder; an attempt is launched only once no process of the one before it lives (the folder's
lock, :mod:`cloudddp.backends.folderlock`, says whether one does), and a run whose supervisor was lost while its
nodes train is adopted, not resubmitted (:meth:`~cloudddp.backends.base.Backend.adopt`). If the watcher is gone
(its machine restarted), ``cloudddp recover`` or any
``status`` of the run starts it again. With ``limits.recover_to: next_size``, after ``limits.capacity_tries``
capacity failures on one size the next attempt takes the next size of the plan's ranking that passes the
preflight checks (:mod:`cloudddp.runs.fallback` renders them at submit). A chain may also move between backends
(``-b auto``, ``limits.recover_to: any_backend``): the next backends' plans are rendered at submit
(:mod:`cloudddp.runs.placement`), and a move carries the latest checkpoint to the next backend's storage first
(:mod:`cloudddp.backends.checkpoints.carry`); each attempt names its backend. Where a chain can move, a run its backend
keeps queued past ``limits.queue_timeout`` is cancelled and moves on as after a capacity failure (:mod:`.queued`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cloudddp.backends.base import Backend
from cloudddp.backends.checkpoints.carry import carried_to
from cloudddp.backends.folderlock import FolderHeld
from cloudddp.backends.procs import Process
from cloudddp.backends.records import LaunchInfo
from cloudddp.backends.status import Cause, RunState, RunStatus
from cloudddp.catalog.ranking import failures
from cloudddp.errors import CloudDDPError
from cloudddp.paths import home
from cloudddp.plan import JsonDataclass, Plan, Target
from cloudddp.runs.fallback import Fallback, plan_fallback
from cloudddp.runs.queued import as_capacity, overdue, refused_why
from cloudddp.runs.runner import Runner, Submission
from cloudddp.spec.model import JobSpec

POLL_SECONDS = float(os.environ.get("CLOUDDDP_RECOVERY_POLL", "10"))
SETTLE_SECONDS = float(os.environ.get("CLOUDDDP_RECOVERY_SETTLE", "60"))
WATCHING, SUCCEEDED, GAVE_UP, CANCELLED = "watching", "succeeded", "gave up", "cancelled"
NEEDS_SECRETS = "needs secrets"
"""The watcher was started again without the literal secrets the next attempt needs (they are never stored):
the chain waits for ``cloudddp recover RUN --spec FILE``."""


@dataclass
class Attempt:
    number: int
    run_id: str
    started: float
    state: str = RunState.PENDING.value
    cause: str | None = None
    reason: str = ""
    size: str | None = None
    backend: str = ""
    """Where it ran (empty in a chain kept before chains could move: the chain's backend)."""
    note: str = ""
    """How it came to run there: the move from the attempt before it, and what was carried."""
    left_out: list[str] = field(default_factory=list)
    """Hosts it was launched without: where a rank of an earlier attempt hung (:meth:`Backend.avoiding`)."""
    queued_out: bool = False
    """Cancelled for waiting queued past the chain's ``queue_timeout``: its end is a capacity failure."""


@dataclass
class Chain:
    chain_id: str
    backend: str
    job_name: str
    plan: dict[str, Any]
    max_recoveries: int
    attempts: list[Attempt] = field(default_factory=list)
    status: str = WATCHING
    message: str = ""
    watcher_pid: int | None = None
    watcher: dict[str, Any] | None = None
    """The watcher process's start time and boot (:class:`~cloudddp.backends.procs.Process`): its pid is trusted
    only while it still names that process."""
    capacity_tries: int = 0
    """Capacity failures on one size before moving to the next of ``fallbacks`` (0: never moves)."""
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    """The next sizes' plans (:class:`~cloudddp.runs.fallback.Fallback`), taken in order."""
    placements: list[dict[str, Any]] = field(default_factory=list)
    """The next backends' plans (:meth:`~cloudddp.runs.placement.Placement.to_state`), taken in order."""
    moves_on: list[str] = field(default_factory=list)
    """The causes after which the chain moves to the next of ``placements`` rather than resubmit where it is:
    ``capacity`` with ``-b auto``, and ``preempted`` too with ``limits.recover_to: any_backend``."""
    queue_timeout: float = 0.0
    """Seconds an attempt may wait queued before it is cancelled and the chain moves on (0: it waits)."""

    # -- storage ---------------------------------------------------------------------------------
    @staticmethod
    def path_of(chain_id: str) -> Path:
        return home() / "chains" / f"{chain_id}.json"

    @classmethod
    def load(cls, chain_id: str) -> Chain:
        data = json.loads(cls.path_of(chain_id).read_text())
        data["attempts"] = [Attempt(**a) for a in data["attempts"]]
        return cls(**data)

    def save(self) -> None:
        path = self.path_of(self.chain_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)

    # -- what a person asks ------------------------------------------------------------------------
    @property
    def current(self) -> Attempt:
        return self.attempts[-1]

    @property
    def recoveries_left(self) -> int:
        return self.max_recoveries - (len(self.attempts) - 1)

    def watcher_alive(self) -> bool:
        process = self.watcher_process()
        return process is not None and process.alive()

    def watcher_process(self) -> Process | None:
        """The watcher, as recorded when it started (None for a chain that names none we can verify)."""
        return Process.from_record(self.watcher_pid, self.watcher)

    def summary(self) -> list[dict[str, Any]]:
        return [{**asdict(a), "backend": self.backend_of(a)} for a in self.attempts]

    def backend_of(self, attempt: Attempt) -> str:
        return attempt.backend or self.backend


def every_chain() -> list[Chain]:
    """Every chain this machine keeps, ended or not, oldest id first."""
    return [Chain.load(path.stem) for path in sorted(Chain.path_of("x").parent.glob("*.json"))]


@dataclass(frozen=True)
class ChainInfo(JsonDataclass):
    """What recovery keeps in each attempt's run record: its chain and its number in it."""

    chain: str | None = None
    attempt: int | None = None


def chain_of(run_id: str, backend: Backend[Any]) -> Chain | None:
    """The chain ``run_id`` belongs to (as its first attempt or a later one), if any."""
    record = backend.records.get(run_id)
    chain_id = ChainInfo.from_fields(record.info).chain if record else None
    if not chain_id or not Chain.path_of(chain_id).exists():
        return None
    return Chain.load(chain_id)


# -- starting a chain ------------------------------------------------------------------------------
def start(
    backend: Backend[Any],
    plan: Plan,
    run_id: str,
    max_recoveries: int,
    *,
    fallback: Fallback | None = None,
    capacity_tries: int = 0,
    placements: list[dict[str, Any]] | None = None,
    moves_on: tuple[str, ...] = (),
    note: str = "",
    queue_timeout: float = 0.0,
) -> Chain:
    """Watch ``run_id`` (just launched from ``plan``) and recover it up to ``max_recoveries`` times, moving to
    ``fallback``'s sizes after ``capacity_tries`` capacity failures on one, or to the next of ``placements``' backends
    after a failure whose cause is in ``moves_on`` (or queued past ``queue_timeout``, where it can move)."""
    size = fallback.size if fallback else None
    movable = bool(fallback and fallback.plans) or (bool(placements) and Cause.CAPACITY.value in moves_on)
    chain = Chain(
        run_id,
        backend.name,
        plan.job_name,
        plan.to_state(),
        max_recoveries,
        [Attempt(1, run_id, time.time(), size=size, backend=backend.name, note=note)],
        capacity_tries=capacity_tries if fallback and fallback.plans else 0,
        fallbacks=fallback.plans if fallback else [],
        placements=list(placements or []),
        moves_on=list(moves_on) if placements else [],
        queue_timeout=queue_timeout if movable else 0.0,
    )
    chain.save()
    backend.records.update(run_id, info=ChainInfo(run_id, 1).to_dict())
    spawn_watcher(chain, plan.literal_secrets())
    return chain


def start_for(
    runner: Runner,
    spec: JobSpec,
    submission: Submission,
    recover: int | None = None,
    *,
    placements: list[dict[str, Any]] | None = None,
    note: str = "",
    fallback: Fallback | None = None,
) -> Chain | None:
    """A chain and its watcher for a run just submitted from ``spec``, with the sizes ``limits.recover_to`` moves to:
    up to ``recover`` resubmissions (None: the spec's ``limits.max_recoveries``); None when that is 0.

    ``placements`` (``-b auto``'s next backends, or with ``recover_to: any_backend`` the job's other backends) are
    moved to after a capacity failure (and a preemption, with ``any_backend``); with ``-b auto`` each counts as a
    recovery, and the budget is at least one move per backend left. ``fallback``: the next sizes, when not these."""
    max_recoveries = spec.limits.max_recoveries if recover is None else recover
    moves_on = [Cause.CAPACITY.value] + ([Cause.PREEMPTED.value] if spec.limits.recover_to == "any_backend" else [])
    if placements and recover is None:
        max_recoveries = max(max_recoveries, len(placements))
    if max_recoveries <= 0:
        return None
    backend = runner.backend
    return start(
        backend,
        submission.plan,
        submission.run_id,
        max_recoveries,
        fallback=fallback or plan_fallback(backend, spec),
        capacity_tries=spec.limits.capacity_tries,
        placements=placements,
        moves_on=tuple(moves_on),
        note=note,
        queue_timeout=float(spec.limits.queue_timeout),
    )


def spawn_watcher(chain: Chain, literals: dict[str, str] | None = None) -> None:
    """Start the chain's watcher, detached (its own session), with literal secrets on its stdin only."""
    log = Chain.path_of(chain.chain_id).with_suffix(".log")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cloudddp.runs.recovery", chain.chain_id],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=0o077,  # what it and its children write is private to this user
        )
    chain.watcher_pid = proc.pid
    started = Process.of(proc.pid)
    chain.watcher = started.record() if started else None
    chain.save()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(literals or {}).encode())
    proc.stdin.close()


def missing_secrets(chain: Chain, literals: Mapping[str, str]) -> list[str]:
    """The literal secrets the chain's next attempts need that ``literals`` lacks."""
    plans = [chain.plan, *(nxt["plan"] for nxt in [*chain.fallbacks, *chain.placements])]
    needed = {name for state in plans for name in Plan.from_state(state).literal_secret_names()}
    return sorted(needed - set(literals))


def needs_secrets(chain: Chain, missing: list[str]) -> None:
    """Stop the chain until the missing literal secrets are supplied, saying how."""
    chain.status = NEEDS_SECRETS
    chain.message = (
        f"recovery stopped: the next attempt needs the secret{'s' if len(missing) > 1 else ''} "
        f"{', '.join('env.' + name for name in missing)}, given as literals in the spec, and this watcher was "
        f"started again without them (secrets are never stored); run `cloudddp recover {chain.chain_id} --spec "
        "<the spec file>` to go on"
    )
    chain.save()


def ensure_watched(chain: Chain, literals: Mapping[str, str] | None = None) -> bool:
    """Start a watcher again for a chain still being watched whose watcher is gone (or one that waits for its
    literal secrets, when ``literals`` has them); True if it did. Without the literal secrets it needs, the chain
    is stopped as :data:`NEEDS_SECRETS` instead: a relaunch never sends an empty secret."""
    literals = dict(literals or {})
    waiting = chain.status == NEEDS_SECRETS
    if not (waiting or chain.status == WATCHING) or (not waiting and chain.watcher_alive()):
        return False
    missing = missing_secrets(chain, literals)
    if missing:
        if not waiting:
            needs_secrets(chain, missing)
        return False
    chain.status, chain.message = WATCHING, "watcher started again"
    spawn_watcher(chain, literals)
    return True


# -- the watcher -----------------------------------------------------------------------------------
def watch(chain_id: str, literals: dict[str, str], poll: float = POLL_SECONDS) -> Chain:
    """Follow the chain until it succeeds, fails for a reason recovery does not cover, or the budget ends."""
    chain = Chain.load(chain_id)
    runners: dict[str, Runner] = {}
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    ended_at: dict[str, float] = {}
    while chain.status == WATCHING and not stop["now"]:
        name = chain.backend_of(chain.current)
        if name not in runners:
            runners[name] = Runner.open(name)
        runner = runners[name]
        status = runner.status(chain.current.run_id)  # a run whose supervisor is lost is adopted, not resubmitted
        if overdue(status, chain.current.started, chain.queue_timeout) and not chain.current.queued_out:
            chain = Chain.load(chain_id)  # marked before the cancel: a watcher started again reads its end the same
            chain.current.queued_out = True
            chain.save()
            runner.backend.cancel(status.run_id)
        if chain.current.queued_out and status.state is RunState.CANCELLED:
            status = as_capacity(status, chain.current.started, chain.queue_timeout)
        if not status.state.terminal or _reason_may_follow(status, ended_at):
            time.sleep(poll)
            continue
        chain = Chain.load(chain_id)  # a cancel may have changed it meanwhile
        _record(chain, status)
        decide(chain, status, runner, literals)
        chain.save()
        if chain.status == WATCHING and chain.current.run_id == status.run_id:
            time.sleep(poll)  # the next attempt waits (its checkpoint folder is still held): ask again later
    return chain


def _reason_may_follow(status: RunStatus, ended_at: dict[str, float]) -> bool:
    """A failure without a known cause, seen less than :data:`SETTLE_SECONDS` ago: a cloud may record why a job
    failed a moment after its status says so (Azure ML's run history), so the watcher asks again before
    deciding that an unknown failure is not to be recovered."""
    if status.state is not RunState.FAILED or status.cause not in (None, Cause.UNKNOWN):
        return False
    first_seen = ended_at.setdefault(status.run_id, time.monotonic())
    return time.monotonic() - first_seen < SETTLE_SECONDS


def _record(chain: Chain, status: RunStatus) -> None:
    attempt = chain.current
    attempt.state, attempt.reason = status.state.value, status.message
    attempt.cause = status.cause.value if status.cause else None


def decide(chain: Chain, status: RunStatus, runner: Runner, literals: dict[str, str]) -> None:
    """After an attempt ended: done, given up (with the reason), or the next attempt launched (on the next size
    when this one has failed for capacity ``capacity_tries`` times)."""
    cause = status.cause or Cause.UNKNOWN
    if chain.status != WATCHING:
        return
    if status.state is RunState.SUCCEEDED:
        chain.status, chain.message = SUCCEEDED, f"succeeded on attempt {chain.current.number}"
    elif cause is Cause.CANCELLED:
        chain.status, chain.message = CANCELLED, "cancelled"
    elif not cause.recoverable:
        chain.status = GAVE_UP
        chain.message = f"not recovered: attempt {chain.current.number} ended by {cause.value} ({status.message})"
    elif chain.recoveries_left <= 0:
        chain.status = GAVE_UP
        chain.message = f"recovery budget spent: {chain.max_recoveries} recoveries, the last ended by {cause.value}"
    elif missing := missing_secrets(chain, literals):
        needs_secrets(chain, missing)
    elif cause.value in chain.moves_on and chain.placements:
        move_backend(chain, runner, literals, status)
    elif cause is Cause.CAPACITY and chain.capacity_tries and chain.current.queued_out:  # queued again: no use
        _move_on(chain, runner, literals, status, queued=True)
    elif cause is Cause.CAPACITY and chain.capacity_tries and _capacity_failures(chain) >= chain.capacity_tries:
        _move_on(chain, runner, literals, status)
    else:
        size, left_out = chain.current.size, _left_out(chain, status)
        try:
            same = runner.backend.restore(chain.plan, literals)
            plan = runner.backend.avoiding(same, left_out)
            left_out = left_out if plan is not same else []  # a backend that cannot leave a host out gets fresh ones
            _launch(chain, runner, plan, checks=False, size=size, left_out=left_out)
        except FolderHeld as e:  # a process of an earlier attempt still trains: never two copies of one training
            chain.message = f"attempt {chain.current.number + 1} waits: {refused_why(e)}"
            return
        except CloudDDPError as e:  # said in the chain, never a watcher that dies and repeats it at each restart
            chain.status = GAVE_UP
            chain.message = f"not recovered: attempt {chain.current.number + 1} could not launch: {refused_why(e)}"
            return
        chain.message = f"attempt {chain.current.number} after {cause.value}: {status.message}" + (
            f"; launched without {', '.join(left_out)}" if left_out else ""
        )


def _left_out(chain: Chain, status: RunStatus) -> list[str]:
    """The hosts the next attempt goes without: every earlier attempt's, and this hang's culprit's host."""
    hosts = list(chain.current.left_out)
    failure = status.details.get("failure") or {}
    culprit = failure.get("culprit_host") if status.cause is Cause.HANG else None
    if culprit and culprit not in hosts:
        hosts.append(str(culprit))
    return hosts


def _capacity_failures(chain: Chain) -> int:
    """Capacity failures in a row at the end of the chain, on the current attempt's size."""
    ours = [a.size == chain.current.size and a.cause == Cause.CAPACITY.value for a in reversed(chain.attempts)]
    return ours.index(False) if False in ours else len(ours)


def _launch(
    chain: Chain,
    runner: Runner,
    plan: Plan,
    *,
    checks: bool,
    size: str | None,
    note: str = "",
    left_out: list[str] | None = None,
) -> None:
    number = chain.current.number + 1
    run_id = runner.launch(runner.backend.for_attempt(plan, number), checks=checks)
    runner.backend.records.update(run_id, info=ChainInfo(chain.chain_id, number).to_dict())
    backend = runner.backend.name
    attempt = Attempt(number, run_id, time.time(), size=size, backend=backend, note=note, left_out=left_out or [])
    chain.attempts.append(attempt)


def _move_on(chain: Chain, runner: Runner, literals: dict[str, str], status: RunStatus, queued: bool = False) -> None:
    """Launch the next size that passes the preflight checks (after capacity failures, or ``queued`` too long); give
    up naming each size's reason if none does."""
    old, why = chain.current.size, "a wait in the queue" if queued else failures(_capacity_failures(chain))
    skipped = []
    while chain.fallbacks:
        nxt = chain.fallbacks.pop(0)
        try:
            _launch(chain, runner, runner.backend.restore(nxt["plan"], literals), checks=True, size=nxt["size"])
        except CloudDDPError as e:  # a failed check, the service's refusal (a clash, a 403, quota): the next may launch
            skipped.append(f"{nxt['size']} ({refused_why(e)})")
            continue
        chain.plan = nxt["plan"]
        chain.message = f"attempt {chain.current.number} on {nxt['size']} after {why} on {old} ({status.message})" + (
            f"; skipped {', '.join(skipped)}" if skipped else ""
        )
        return
    chain.status = GAVE_UP
    chain.message = f"not recovered: {why} on {old} and no next size passes the preflight checks"
    chain.message += f": {', '.join(skipped)}" if skipped else " (none left in the ranking)"


def move_backend(chain: Chain, runner: Runner, literals: dict[str, str], status: RunStatus) -> None:
    """Launch the job on the next backend of the chain's placements that takes it, after carrying the latest
    checkpoint there from where the last attempt kept it; give up naming each backend's reason if none does."""
    old, cause = runner.backend.name, (status.cause or Cause.UNKNOWN).value
    source = _checkpoints_of(chain, runner)
    skipped = []
    while chain.placements:
        nxt = chain.placements.pop(0)
        try:
            there = Runner.open(nxt["backend"])
            plan = there.backend.restore(nxt["plan"], literals)
            carried = carried_to(runner.backend, source, there.backend, plan.target)
            note = f"moved from {old} after {cause} ({status.message})" + (f"; {carried}" if carried else "")
            _launch(chain, there, plan, checks=True, size=None, note=note)
        except CloudDDPError as e:  # a failed check, its credentials, its storage, the service's refusal: the next
            skipped.append(f"{nxt['backend']} ({refused_why(e)})")
            continue
        chain.plan, chain.fallbacks = nxt["plan"], []  # the next sizes were the old backend's
        chain.message = f"attempt {chain.current.number} on {nxt['backend']}: {note}" + (
            f"; skipped {', '.join(skipped)}" if skipped else ""
        )
        return
    chain.status = GAVE_UP
    chain.message = f"not recovered: {cause} on {old} and no other backend took the job"
    chain.message += f": {', '.join(skipped)}" if skipped else " (none left in the placement)"


def _checkpoints_of(chain: Chain, runner: Runner) -> Target:
    """The target (with its checkpoint folder) of the chain's current attempt, as its launch recorded it."""
    record = runner.backend.records.get(chain.current.run_id)
    return runner.backend.target_of(LaunchInfo.from_fields(record.info).target if record else chain.plan["target"])


def cancel(chain: Chain) -> None:
    """Stop recovering (the current attempt is cancelled by the caller)."""
    chain.status, chain.message = CANCELLED, "cancelled"
    chain.save()
    watcher = chain.watcher_process()
    if watcher is not None and watcher.alive():
        watcher.signal(signal.SIGTERM)  # only if its pid still names the watcher we started


def main(argv: list[str]) -> int:
    literals = json.loads(sys.stdin.read() or "{}")
    chain = watch(argv[0], literals)
    print(f"chain {chain.chain_id}: {chain.status}: {chain.message}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
