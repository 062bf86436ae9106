"""Who a hung run waits for, from every rank's stacks: the rank(s) not in the collective the others wait in.

Shipped in every code snapshot as ``_cloudddp_culprit.py`` (the in-job hang doctor, :mod:`cloudddp.injob.hang`,
decides inside the job) and used by cloudddp itself on the stacks a rank printed (``cloudddp stacks``, the local
stall watchdog). Standard library only.

A rank's stacks come in one of three forms, all read into :class:`Thread` lists: the doctor's own record (JSON from
``sys._current_frames``), :mod:`faulthandler`'s text (a rank that got the stack signal), or ``py-spy dump``'s text.
The decision, :func:`decide`:

- a rank whose main thread has a frame of a collective (:data:`COLLECTIVES`: torch.distributed's functions, and
  autograd's backward, where DDP's all-reduce waits) *waits*; so does a rank whose collective timed out;
- a rank that waits in no collective while others do is a *culprit*: it is somewhere else (a sleep, a deadlock, a
  dataset read that never returns), and the line it is on is named;
- a rank that gave no stack is named as such (its process is gone, or stuck in native code holding the GIL);
- when every rank waits, but not in the same collective, the ranks in the rarer one are the culprits (a
  mismatched collective: one rank broadcasts while the others all-reduce).
"""

from __future__ import annotations

import json
import linecache
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

TAG = "cloudddp: hang:"
"""The first words of the verdict's line in a run's log: the backends' status reads the verdict from it."""
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "barrier",
        "monitored_barrier",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "_engine_run_backward",
        "backward",
    }
)
"""Function names that wait for the other ranks. ``backward`` is autograd's: DDP all-reduces gradients inside it."""
BACKWARD = "backward (DDP's all-reduce of the gradients)"
_LIBRARY = re.compile(r"[/\\](site-packages|dist-packages|lib/python\d\.\d+|_cloudddp_\w+\.py)|^<")
"""Files that are not the script's: a frame in them is never the line a culprit is named by."""


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    source: str = ""
    """The line's text, read where the rank ran (its files may not be where the verdict is shown)."""

    def where(self) -> str:
        """``train.py:54 in <module>: time.sleep(3600)``, with the source line where it is known."""
        short = self.file.rsplit("/", 1)[-1]
        text = self.source or linecache.getline(self.file, self.line).strip()
        return f"{short}:{self.line} in {self.function}" + (f": {text}" if text else "")


@dataclass(frozen=True)
class Thread:
    name: str
    frames: tuple[Frame, ...]
    """Most recent call first."""
    main: bool = False


@dataclass
class RankStacks:
    """One rank's answer: its threads, where it runs, and the collective it timed out in (if it did)."""

    rank: int
    threads: list[Thread]
    node: str = ""
    host: str = ""
    timed_out: str = ""
    """The collective's error, for a rank whose collective timed out (the doctor's record)."""

    @property
    def main(self) -> Thread | None:
        return next((t for t in self.threads if t.main), self.threads[0] if self.threads else None)

    def waiting_in(self) -> str | None:
        """The collective the main thread waits in (the outermost torch frame of one), or None."""
        main = self.main
        names = [f.function for f in (main.frames if main else ()) if f.function in COLLECTIVES]
        if names:
            return BACKWARD if names[-1] in ("backward", "_engine_run_backward") else names[-1]
        return "a collective" if self.timed_out else None

    def own_frame(self) -> Frame | None:
        """The innermost frame of the main thread in the script's own files (else the innermost of all)."""
        main = self.main
        frames = main.frames if main else ()
        return next((f for f in frames if not _LIBRARY.search(f.file)), frames[0] if frames else None)

    def place(self) -> str:
        where = f"rank {self.rank}"
        if self.node:
            where += f" on node {self.node}"
        if self.host:
            where += f" ({self.host})"
        return where


@dataclass
class Verdict:
    culprits: list[RankStacks]
    waiting: dict[str, list[int]] = field(default_factory=dict)
    """Collective -> the ranks waiting in it."""
    silent: list[int] = field(default_factory=list)
    """Ranks that gave no stack."""

    def line(self) -> str:
        """One line: who is at fault and where, then who waits in what (``TAG`` first)."""
        parts = []
        for rank in self.culprits:
            frame = rank.own_frame()
            parts.append(f"{rank.place()}: {frame.where() if frame else 'no Python frame'}")
        if self.silent:
            parts.append(f"rank{'s' if len(self.silent) > 1 else ''} {_ranks(self.silent)} gave no stack")
        if not parts:
            parts.append("no rank stands out")
        waits = [f"rank{'s' if len(r) > 1 else ''} {_ranks(r)}: waiting in {what}" for what, r in self.waiting.items()]
        return f"{TAG} " + "; ".join(parts + waits)

    def culprit_ranks(self) -> list[int]:
        return [r.rank for r in self.culprits] + self.silent

    def to_dict(self) -> dict[str, object]:
        first = self.culprits[0] if self.culprits else None
        frame = first.own_frame() if first else None
        return {
            "culprits": self.culprit_ranks(),
            "culprit_node": first.node if first else "",
            "culprit_host": first.host if first else "",
            "culprit_line": frame.where() if frame else "",
            "waiting": self.waiting,
        }


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def decide(stacks: Sequence[RankStacks], world: int | None = None) -> Verdict:
    """The culprits among ``stacks`` (one per rank that answered), ranks of ``world`` that did not answer named as
    silent."""
    waiting: dict[str, list[int]] = {}
    culprits = []
    for rank in sorted(stacks, key=lambda r: r.rank):
        what = rank.waiting_in()
        if what is None:
            culprits.append(rank)
        else:
            waiting.setdefault(what, []).append(rank.rank)
    answered = {r.rank for r in stacks}
    silent = [r for r in range(world)] if world is not None else []
    silent = [r for r in silent if r not in answered]
    if not culprits and not silent and len(waiting) > 1:  # a mismatched collective: the rarer ones are odd
        rarest = min(waiting, key=lambda w: (len(waiting[w]), w))
        odd = waiting.pop(rarest)
        culprits = [r for r in stacks if r.rank in odd]
    return Verdict(culprits, waiting, silent)


def groups(stacks: Sequence[RankStacks]) -> list[tuple[list[int], Thread | None]]:
    """Ranks with the same main-thread stack, each group once: those waiting in no collective first, then the
    smallest groups (the odd ones out)."""
    by_stack: dict[tuple[Frame, ...], list[RankStacks]] = {}
    for rank in sorted(stacks, key=lambda r: r.rank):
        main = rank.main
        by_stack.setdefault(main.frames if main else (), []).append(rank)
    ordered = sorted(
        by_stack.values(), key=lambda members: (members[0].waiting_in() is not None, len(members), members[0].rank)
    )
    return [([m.rank for m in members], members[0].main) for members in ordered]


def render(stacks: Sequence[RankStacks], *, all_threads: bool = False) -> list[str]:
    """Every rank's stack, grouped (:func:`groups`), most recent call first; ``all_threads``: each rank's other
    threads too (ranks alike in their main thread are shown by their first)."""
    by_rank = {r.rank: r for r in stacks}
    lines: list[str] = []
    for ranks, main in groups(stacks):
        first = by_rank[ranks[0]]
        head = f"rank{'s' if len(ranks) > 1 else ''} {_ranks(ranks)}"
        what = first.waiting_in()
        lines.append(f"{head}{f' (waiting in {what})' if what else ''}, most recent call first:")
        threads = first.threads if all_threads else ([main] if main else [])
        for thread in threads:
            if all_threads:
                lines.append(f"  thread {thread.name}{' (main)' if thread.main else ''}:")
            lines += [f"    {f.where()}" for f in thread.frames] or ["    (no Python frame)"]
    return lines


@dataclass
class Capture:
    """Every rank's stacks asked for on demand (``cloudddp stacks``): those that gave one, each rank once, and why each
    other gave none."""

    stacks: list[RankStacks]
    missing: dict[int, str] = field(default_factory=dict)
    """Rank -> why it gave no stack (its process does not handle the signal, nothing reached the log in time)."""
    world: int = 0
    """How many ranks the job has (0: not known)."""

    def verdict(self) -> Verdict | None:
        """Who stands out, where some rank waits in a collective and another is elsewhere or gave no stack; None
        where the ranks are alike (on a healthy run a rank is often caught outside a collective: one look, not a
        hang)."""
        found = decide(self.stacks, self.world or None)
        waiting = sum(len(ranks) for ranks in found.waiting.values())
        return found if waiting and (found.culprits or found.silent) else None

    def to_dict(self) -> dict[str, object]:
        verdict = self.verdict()
        return {
            "world": self.world,
            "ranks": [json.loads(to_record(rank)) for rank in sorted(self.stacks, key=lambda r: r.rank)],
            "missing": {str(rank): why for rank, why in sorted(self.missing.items())},
            "groups": [
                {"ranks": ranks, "waiting_in": _waiting(self.stacks, ranks[0])} for ranks, _ in groups(self.stacks)
            ],
            "verdict": dict(verdict.to_dict(), line=verdict.line()[len(TAG) :].strip()) if verdict else None,
        }


def _waiting(stacks: Sequence[RankStacks], rank: int) -> str | None:
    return next(r.waiting_in() for r in stacks if r.rank == rank)


def captured(answers: Iterable[Mapping[str, object]]) -> Capture:
    """A :class:`Capture` from the ranks' answers (:class:`cloudddp.injob.rank_stacks.Answer` as a dict): ``py-spy``'s
    or ``faulthandler``'s text read into threads; the first answer of a rank kept."""
    found = Capture([])
    for answer in answers:
        rank, how, text = int(str(answer["rank"])), str(answer["how"]), str(answer.get("text", ""))
        found.world = max(found.world, int(str(answer.get("world", 0))))
        if rank in found.missing or any(r.rank == rank for r in found.stacks):
            continue
        threads = parse_py_spy(text) if how == "py-spy" else parse_faulthandler(text) if how == "faulthandler" else []
        if threads:
            found.stacks.append(RankStacks(rank, threads, str(answer.get("node", "")), str(answer.get("host", ""))))
        else:
            found.missing[rank] = text if how == "none" else f"its {how} answer held no stack"
    return found


# -- reading stacks ----------------------------------------------------------------------------------------------
_FAULT_HEAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*?)\])? \(most recent call first\):")
_FAULT_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_SPY_HEAD = re.compile(r'^Thread (\S+) \((\w+)\)(?:: "(.*)")?')
_SPY_FRAME = re.compile(r"^\s+(\S.*?) \((.+?):(\d+)\)\s*$")


def parse_faulthandler(text: str, main_ident: str | None = None) -> list[Thread]:
    """:mod:`faulthandler`'s dump of all threads. The main thread is ``main_ident`` (hex) where given; else the one
    whose outermost frame is a ``<module>`` (the script's top level)."""
    threads: list[tuple[str, list[Frame]]] = []
    for line in text.splitlines():
        if head := _FAULT_HEAD.match(line):
            threads.append((head.group(3) or head.group(2), []))
        elif (frame := _FAULT_FRAME.match(line)) and threads:
            threads[-1][1].append(Frame(frame.group(1), int(frame.group(2)), frame.group(3)))
    return _with_main(threads, main_ident)


def parse_py_spy(text: str) -> list[Thread]:
    """``py-spy dump``'s text; its main thread is the one py-spy calls ``MainThread``."""
    threads: list[tuple[str, list[Frame]]] = []
    for line in text.splitlines():
        if head := _SPY_HEAD.match(line):
            threads.append((head.group(3) or head.group(1), []))
        elif (frame := _SPY_FRAME.match(line)) and threads:
            threads[-1][1].append(Frame(frame.group(2), int(frame.group(3)), frame.group(1)))
    return _with_main(threads, "MainThread")


def _with_main(threads: list[tuple[str, list[Frame]]], main_name: str | None) -> list[Thread]:
    names = [name for name, _ in threads]
    if main_name in names:
        main = names.index(main_name)
    else:
        main = next((i for i, (_, frames) in enumerate(threads) if frames and frames[-1].function == "<module>"), 0)
    return [Thread(name, tuple(frames), main=i == main) for i, (name, frames) in enumerate(threads)]


def from_record(record: Mapping[str, object]) -> RankStacks:
    """A rank's answer as the doctor records it (:func:`to_record`)."""
    threads = [
        Thread(str(t["name"]), tuple(Frame(*f[:4]) for f in t["frames"]), bool(t["main"]))
        for t in record.get("threads", [])  # type: ignore[attr-defined]
    ]
    return RankStacks(
        int(str(record["rank"])),
        threads,
        str(record.get("node", "")),
        str(record.get("host", "")),
        str(record.get("timed_out", "")),
    )


def to_record(stacks: RankStacks) -> str:
    return json.dumps(
        {
            "rank": stacks.rank,
            "node": stacks.node,
            "host": stacks.host,
            "timed_out": stacks.timed_out,
            "threads": [
                {"name": t.name, "main": t.main, "frames": [[f.file, f.line, f.function, f.source] for f in t.frames]}
                for t in stacks.threads
            ],
        }
    )
