"""A running run's straggler and interconnect result in its status (the last lines the watchers inside the ranks
printed, read from the log at most every few seconds), and the setting a job of more than one process carries into
its ranks."""

from __future__ import annotations

from cloudddp.backends.status import LogLine, RunState, RunStatus
from cloudddp.injob import pace
from cloudddp.injob.pace import TAG
from cloudddp.runs import notes
from cloudddp.runtime import Places, straggler_setting
from cloudddp.spec.model import JobSpec


def spec(**limits: object) -> JobSpec:
    return JobSpec.model_validate({"name": "s", "code": {"dir": ".", "entry": "t.py"}, "limits": limits})


def test_the_job_carries_the_watch_for_more_than_one_process_unless_it_is_off() -> None:
    many, one = Places("/m", None, 1, 2), Places("/m", None, 1, 1)
    assert straggler_setting(spec(), many) == "1.5:10"
    assert straggler_setting(spec(straggler_factor=2, straggler_every="1m"), many) == "2:60"
    assert straggler_setting(spec(straggler_factor="off"), many) is None
    assert straggler_setting(spec(), one) is None


def test_a_running_status_shows_the_last_straggler_line_and_none_once_caught_up() -> None:
    said = f"{TAG} rank 1 on node 0 (h): 0.21 s of its own work per step against a median of 0.01 s (×21)"
    lines = [LogLine("rank0", "step 1", rank=0), LogLine("rank0", "[rank0]: " + said, rank=0)]
    running = RunStatus("r", "local", RunState.RUNNING)
    notes._read.clear()
    assert notes.noted(running, lambda: lines).details[notes.STRAGGLER] == said[len(TAG) + 1 :]
    notes._read.clear()
    caught_up = [*lines, LogLine("rank0", f"{TAG} {pace.CAUGHT_UP}: every rank ...", rank=0)]
    assert notes.STRAGGLER not in notes.noted(running, lambda: caught_up).details
    notes._read.clear()
    ended = RunStatus("r", "local", RunState.SUCCEEDED)
    assert notes.STRAGGLER not in notes.noted(ended, lambda: lines).details
    notes._read.clear()
    echoed = [LogLine("rank1", said, rank=1)]  # another rank's output is not the watch's
    assert notes.STRAGGLER not in notes.noted(running, lambda: echoed).details


def test_the_preflights_result_is_shown_and_the_log_is_read_at_most_every_few_seconds() -> None:
    from cloudddp.injob.interconnect import TAG as FABRIC

    result = f"{FABRIC} chosen for 400 Gb/s InfiniBand; NCCL uses NET/IB; 2 nodes busbw 182 GB/s at 1 GiB"
    reads: list[int] = []

    def log() -> list[LogLine]:
        reads.append(1)
        return [LogLine("rank0", result, rank=0)]

    clock = [100.0]
    running = RunStatus("fabric-run", "slurm", RunState.RUNNING)
    notes._read.clear()
    shown = notes.noted(running, log, clock=lambda: clock[0])
    assert shown.details[notes.INTERCONNECT] == result[len(FABRIC) + 1 :]
    clock[0] += notes.EVERY - 1
    assert notes.noted(running, log, clock=lambda: clock[0]).details == shown.details and len(reads) == 1
    clock[0] += 1
    notes.noted(running, log, clock=lambda: clock[0])
    assert len(reads) == 2
