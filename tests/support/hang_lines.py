"""The lines the hang doctor (cloudddp/injob/hang.py) prints to the first timed-out rank's errors, made by the same
code it makes them with (cloudddp/injob/culprit.py): rank 1 asleep in the script, rank 0 waiting in backward."""

from __future__ import annotations

from cloudddp.injob.culprit import Frame, RankStacks, Thread, decide, render

SLEEPING = Frame("/opt/ml/code/train.py", 13, "<module>", "time.sleep(3600)")
BACKWARD = (
    Frame("/usr/lib/python3/site-packages/torch/autograd/graph.py", 825, "_engine_run_backward", "return ..."),
    Frame("/usr/lib/python3/site-packages/torch/_tensor.py", 626, "backward", "torch.autograd.backward(...)"),
    Frame("/opt/ml/code/train.py", 15, "<module>", "loss.backward()"),
)


def doctor_lines(host0: str = "algo-1", host1: str = "algo-2") -> list[str]:
    """The verdict's line, the heading and the grouped stacks, as the doctor prints them (without any prefix)."""
    stacks = [
        RankStacks(0, [Thread("MainThread", BACKWARD, main=True)], "0", host0, timed_out="Timed out waiting 10000ms"),
        RankStacks(1, [Thread("MainThread", (SLEEPING,), main=True)], "1", host1),
    ]
    return [decide(stacks, 2).line(), "cloudddp: every rank's stack, the odd ones out first:", *render(stacks)]
