"""The keeper of ``checkpoint.files`` (:mod:`cloudddp.injob.keepfiles`) keeps a file within seconds of its being
written (renamed into place, or closed), never keeps a copy half-written, and its kept set follows the script's
rotation look by look."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cloudddp.injob import keepfiles
from cloudddp.injob.keepfiles import Keeper

LINUX = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="which files are open for writing is asked of Linux's /proc"
)


def linked(tmp_path: Path, *declared: str) -> tuple[Keeper, Path, Path]:
    """A keeper of ``declared`` in a fresh working folder, its links made: (keeper, working folder, kept folder)."""
    work = tmp_path / "work"
    work.mkdir()
    keeper = Keeper(list(declared), work, tmp_path / "ckpt")
    keeper.link()
    return keeper, work, tmp_path / "ckpt" / "files"


def until(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


class Looks:
    """A running keeper's looks, counted: which look first saved each path, and actions run one after each look, in
    the keeper's thread (so the next look is the first to see what one did)."""

    def __init__(self, keeper: Keeper) -> None:
        self.done = 0
        self.saved: dict[str, int] = {}
        self.actions: list[Callable[[], None]] = []
        real = keeper.save

        def save(*, final: bool = False) -> list[str]:
            found = real(final=final)
            self.done += 1
            for path in found:
                self.saved.setdefault(path, self.done)
            if self.actions:
                self.actions.pop(0)()
            return found

        keeper.save = save  # type: ignore[method-assign]

    def after_looks(self, *actions: Callable[[], None]) -> list[int]:
        """Run each of ``actions`` right after a look, the next one after the next look; returns their looks."""
        when: list[int] = []

        def recorded(action: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                action()
                when.append(self.done)

            return run

        self.actions.extend([recorded(a) for a in actions])  # at once: consecutive looks run them
        until(lambda: len(when) == len(actions), "the keeper looks")
        return when


@pytest.fixture
def running() -> Iterator[Callable[[Keeper, float], Looks]]:
    """Start a keeper's looks every ``every`` seconds; stopped when the test ends."""
    stops: list[threading.Event] = []

    def start(keeper: Keeper, every: float) -> Looks:
        looks = Looks(keeper)
        stops.append(keeper.keep_saving(every=every))
        return looks

    yield start
    for stop in stops:
        stop.set()


def renamed_into_place(path: Path, data: bytes) -> None:
    """``torch.save`` to a temporary file and ``os.replace`` over ``path``: Lightning's and most scripts' habit."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def test_the_launchers_keeper_keeps_a_renamed_file_within_seconds(tmp_path: Path) -> None:
    """With the launcher's own interval (:data:`~cloudddp.injob.keepfiles.SAVE_EVERY`): not after two 30 s looks, so
    a stop's hard kill soon after a save no longer loses it."""
    keeper, work, kept = linked(tmp_path, "last.ckpt")
    stop = keeper.keep_saving()
    try:
        renamed_into_place(work / "last.ckpt", b"epoch 7")
        start = time.monotonic()
        until((kept / "last.ckpt").is_file, "a renamed file is kept while the program runs", seconds=20)
        assert time.monotonic() - start < 10, "kept within seconds"
        assert (kept / "last.ckpt").read_bytes() == b"epoch 7"
    finally:
        stop.set()


@LINUX
def test_a_file_renamed_into_place_is_kept_at_the_next_look(tmp_path: Path, running: Callable[..., Looks]) -> None:
    """A new inode where the link (or the last version) was, open for writing nowhere: the rename put it there whole,
    so the first look that sees it copies it, and every version after it too."""
    keeper, work, kept = linked(tmp_path, "last.ckpt")
    looks = running(keeper, 0.02)
    for epoch in range(1, 4):
        data = f"epoch {epoch}".encode() * 1000
        [at] = looks.after_looks(lambda data=data: renamed_into_place(work / "last.ckpt", data))
        until(lambda: str(work / "last.ckpt") in looks.saved, "kept")
        assert looks.saved.pop(str(work / "last.ckpt")) == at + 1, "kept by the first look after the rename"
        assert (kept / "last.ckpt").read_bytes() == data


def test_without_proc_a_renamed_file_is_kept_once_two_looks_saw_it_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no process's open files can be read (no /proc), nothing tells a renamed file from one still being
    written under its name: it is kept at its second unchanged look, still seconds after the rename."""
    monkeypatch.setattr(keepfiles, "open_for_writing", lambda _: None)
    keeper, work, kept = linked(tmp_path, "last.ckpt")
    renamed_into_place(work / "last.ckpt", b"epoch 1")
    assert keeper.save() == []
    assert keeper.save() == [str(work / "last.ckpt")]
    assert (kept / "last.ckpt").read_bytes() == b"epoch 1"


LINES = 8


def version(number: int) -> str:
    return "".join(f"v{number} line {k} of {LINES}\n" for k in range(1, LINES + 1))


def whole(text: str) -> bool:
    """``text`` is one version of the slow writer's file, all of it."""
    first = text.split(" ", 1)[0]
    return first.startswith("v") and first[1:].isdigit() and text == version(int(first[1:]))


@LINUX
@pytest.mark.parametrize("recreate", [False, True], ids=["rewritten-in-place", "deleted-and-written-anew"])
def test_a_file_written_slowly_is_never_kept_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, running: Callable[..., Looks], recreate: bool
) -> None:
    """The writer pauses between lines far longer than the keeper's looks, so two looks in a row see the file
    unchanged while it is half-written: it is open for writing, so it is not copied; once closed it is, whole."""
    monkeypatch.setattr(keepfiles, "OPEN_RECHECK", 0.05)
    keeper, work, kept = linked(tmp_path, "state.txt")
    (work / "state.txt").unlink()  # the script removes the link and writes the file itself, under its name
    every, versions, done = 0.02, 3, threading.Event()
    failed: list[BaseException] = []

    def write() -> None:
        try:
            for number in range(1, versions + 1):
                if recreate:
                    (work / "state.txt").unlink(missing_ok=True)
                with open(work / "state.txt", "w") as out:
                    for line in version(number).splitlines(keepends=True):
                        out.write(line)
                        out.flush()
                        time.sleep(5 * every)
        except OSError as e:  # said by the test, not lost in the thread
            failed.append(e)
        finally:
            done.set()

    running(keeper, every)
    writer = threading.Thread(target=write)
    writer.start()
    seen: set[str] = set()
    while not done.is_set():
        time.sleep(0.002)
        try:
            text = (kept / "state.txt").read_text()
        except FileNotFoundError:  # deleted by the script (the second kind), so by the keeper too
            continue
        assert whole(text), f"a kept copy was half-written:\n{text}"
        seen.add(text)
    writer.join()
    assert not failed, failed
    until(lambda: (kept / "state.txt").is_file() and (kept / "state.txt").read_text() == version(versions), "kept")
    assert seen <= {version(n) for n in range(1, versions + 1)}


def test_a_copy_of_a_file_that_changes_while_it_is_copied_is_never_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written to in place, or replaced by a rename, during the copy: the temporary copy is dropped and the kept
    copy stays the last whole version; the next look, or the final save's next try, copies the version there."""
    keeper, work, kept = linked(tmp_path, "snapshot.pt")
    renamed_into_place(work / "snapshot.pt", b"epoch 1")
    assert keeper.save(final=True) == [str(work / "snapshot.pt")]
    real = shutil.copyfileobj
    meddle: list[Callable[[], None]] = []

    def copy_then_meddle(source: object, destination: object, *args: object) -> None:
        real(source, destination, *args)  # type: ignore[arg-type]
        if meddle:
            meddle.pop(0)()

    monkeypatch.setattr(keepfiles.shutil, "copyfileobj", copy_then_meddle)

    def append() -> None:
        with open(work / "snapshot.pt", "ab") as out:
            out.write(b" and more")

    for change in (append, lambda: renamed_into_place(work / "snapshot.pt", b"epoch 3, renamed in")):
        (work / "snapshot.pt").write_bytes(b"epoch 2, half")
        keeper.save()
        meddle.append(change)
        assert keeper.save() == [], "copied while it changed"
        assert (kept / "snapshot.pt").read_bytes() == b"epoch 1", "the kept copy is the last whole version"
        assert not [p.name for p in kept.iterdir() if p.name.startswith(".")], "the temporary copy is removed"
    meddle.append(append)
    assert keeper.save(final=True) == [str(work / "snapshot.pt")]  # the final save tries again at once
    assert (kept / "snapshot.pt").read_bytes() == b"epoch 3, renamed in and more"


@LINUX
def test_a_file_held_open_for_writing_is_kept_once_closed_or_once_unchanged_long_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keepfiles, "OPEN_RECHECK", 0.0)
    keeper, work, kept = linked(tmp_path, "logs/*.txt", "state.json")
    (work / "state.json").unlink()
    with open(work / "state.json", "w") as state:
        state.write('{"step": 1')  # half of it: the writer holds it open
        state.flush()
        for _ in range(3):
            assert keeper.save() == []
    assert keeper.save() == [str(work / "state.json")]  # closed: written
    monkeypatch.setattr(keepfiles, "OPEN_QUIET", 0.2)
    (work / "logs").mkdir()
    with open(work / "logs" / "train.txt", "w") as log:  # a log a program keeps open all along
        log.write("step 1\n")
        log.flush()
        assert keeper.save() == []
        assert keeper.save() == []  # unchanged, but open
        time.sleep(0.25)
        assert keeper.save() == [str(work / "logs" / "train.txt")]  # unchanged for OPEN_QUIET: kept all the same
    assert (kept / "logs" / "train.txt").read_text() == "step 1\n"


def kept_files(kept: Path) -> set[str]:
    return {p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file() and not p.name.startswith(".")}


def script_files(work: Path) -> set[str]:
    return {p.relative_to(work).as_posix() for p in (work / "out").rglob("*") if p.is_file() or p.is_symlink()}


def test_a_rotation_never_leaves_more_kept_copies_than_the_script_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hugging Face's ``save_total_limit=2``: each save writes ``checkpoint-N`` (a file renamed into place and one
    written in place) and deletes ``checkpoint-(N-2)``. Each look removes the deleted ones' kept copies before it
    copies anything, so no copy it makes leaves more kept copies than the script has; after each look the kept set
    is the script's own."""
    keeper, work, kept = linked(tmp_path, "out/**")
    real = keepfiles._copy_atomic
    counts: list[tuple[int, int]] = []

    def counting(source: Path, destination: Path, *args: object) -> bool:
        copied = real(source, destination, *args)  # type: ignore[arg-type]
        counts.append((len(kept_files(kept)), len(script_files(work))))
        return copied

    monkeypatch.setattr(keepfiles, "_copy_atomic", counting)
    for step in range(1, 8):
        folder = work / "out" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        renamed_into_place(folder / "model.safetensors", f"weights {step}".encode())
        (folder / "trainer_state.json").write_text(f'{{"step": {step}}}')
        keeper.save()  # new matches: settled at their second look
        if step > 2:
            shutil.rmtree(work / "out" / f"checkpoint-{step - 2}")
        keeper.save()  # removes checkpoint-(N-2)'s kept copies, copies checkpoint-N
        assert kept_files(kept) == script_files(work), f"after step {step}"
    assert counts and all(k <= s for k, s in counts), counts
    assert sorted(p.name for p in (kept / "out").iterdir()) == ["checkpoint-6", "checkpoint-7"]


def test_a_deleted_files_kept_copy_is_removed_at_the_next_look(tmp_path: Path, running: Callable[..., Looks]) -> None:
    """Whether the script deleted a file it renamed into place or the link a restored file stands behind."""
    ckpt = tmp_path / "ckpt" / "files"
    (ckpt / "out").mkdir(parents=True)
    (ckpt / "out" / "restored.pt").write_bytes(b"from the run before")
    keeper, work, kept = linked(tmp_path, "out/*.pt", "last.ckpt")
    renamed_into_place(work / "last.ckpt", b"epoch 1")
    keeper.save(final=True)
    looks = running(keeper, 0.02)
    for path in (work / "out" / "restored.pt", work / "last.ckpt"):
        copy, gone = kept / path.relative_to(work), []
        assert copy.is_file()
        at, then = looks.after_looks(path.unlink, lambda copy=copy, gone=gone: gone.append(not copy.exists()))
        assert then == at + 1 and gone == [True], "removed by the look after the deletion"
    assert kept_files(kept) == set()


def test_a_link_the_batch_script_made_is_followed_too(tmp_path: Path) -> None:
    """On Slurm the batch script links (``_cloudddp_keep.py link``) before the launchers start: a launcher's keeper
    finds the links in place, and a file the script deletes behind one still loses its kept copy."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "files" / "out").mkdir(parents=True)
    (ckpt / "files" / "out" / "checkpoint-1.pt").write_bytes(b"1")
    work = tmp_path / "work"
    work.mkdir()
    Keeper(["out/*.pt"], work, ckpt).link()  # the batch script
    launcher = Keeper(["out/*.pt"], work, ckpt)
    assert launcher.link() == []
    (work / "out" / "checkpoint-1.pt").unlink()
    launcher.save()
    assert not (ckpt / "files" / "out" / "checkpoint-1.pt").exists()


def test_a_look_that_finds_nothing_new_reads_no_file_and_asks_proc_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It runs every second on each node's first launcher while the training runs: stats only."""
    keeper, work, _ = linked(tmp_path, "last.ckpt", "state/*.json")
    renamed_into_place(work / "last.ckpt", b"epoch 1")
    (work / "state").mkdir()
    (work / "state" / "a.json").write_text("{}")
    keeper.save(final=True)

    def refuse(*_: object) -> None:
        raise AssertionError("a look that found nothing new did more than stat")

    monkeypatch.setattr(keepfiles, "open_for_writing", refuse)
    monkeypatch.setattr(keepfiles, "_copy_atomic", refuse)
    for _ in range(3):
        assert keeper.save() == []


def test_a_temporary_copy_a_killed_keeper_left_is_removed_at_the_next_link(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt" / "files" / "out"
    ckpt.mkdir(parents=True)
    left = ckpt / f".model.pt.x1y2z3{keepfiles.PARTIAL}"
    left.write_bytes(b"half")
    os.utime(left, (time.time() - 2 * keepfiles.PARTIAL_STALE,) * 2)
    busy = ckpt / f".model.pt.a1b2c3{keepfiles.PARTIAL}"  # another node's copy, being made now
    busy.write_bytes(b"being written")
    _, work, _ = linked(tmp_path, "out/**")
    assert not left.exists() and busy.exists()
    assert not (work / "out").exists() or not list((work / "out").iterdir())  # never linked as the script's file


def test_a_copy_that_keeps_failing_is_said_once_not_at_every_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A full disk during a long training: a look a second must not write a line a second into the rank's log."""
    keeper, work, kept = linked(tmp_path, "last.ckpt")
    renamed_into_place(work / "last.ckpt", b"epoch 1")
    errors = ["No space left on device"] * 3 + ["Disk quota exceeded"]

    def full(*_: object) -> bool:
        raise OSError(errors.pop(0))

    monkeypatch.setattr(keepfiles, "_copy_atomic", full)
    for _ in range(4):
        assert keeper.save() == []
    said = capsys.readouterr().err
    assert said.count("could not save") == 2, said
    assert "No space left on device" in said and "Disk quota exceeded" in said
    monkeypatch.undo()
    assert keeper.save() == [str(work / "last.ckpt")]
    assert (kept / "last.ckpt").read_bytes() == b"epoch 1"
