"""Files a script keeps across restarts (``checkpoint.files``): each declared path resolves into the training's
checkpoint folder, so the script's own save and load work unchanged and a resubmit resumes.

A declared path is relative to the script's working folder (or absolute). Before the program starts, on every
node, :meth:`Keeper.link` makes it a symbolic link to its kept copy, ``$CLOUDDDP_CHECKPOINT_DIR/files/<path>``
(an absolute path under ``files/_root/``). A missing kept copy leaves a dangling link: ``os.path.exists`` says
False, so the script starts afresh, and its first ``open(path, "w")`` or ``torch.save`` creates the kept copy
through the link. Every later write lands in the checkpoint folder directly.

What breaks a link, and how it is handled:

- **a script that writes a temporary file and renames it over the path** (``os.replace(tmp, path)``): the
  rename replaces the link with a plain file in the working folder. :meth:`Keeper.save` copies such a file into
  the checkpoint folder: each node's first launcher looks every :data:`SAVE_EVERY` s and copies it once settled
  (below), and every launcher when its program ends. Work after the last copy is lost to a hard kill.
- **a pattern** (``state/*.json``, ``runs/**``): nothing to link before the files exist, so the kept files that
  match are linked at start and new matches are saved as above (restore-and-save).
- **a working folder where no link can be made** (a read-only or link-less filesystem): the kept copy is copied
  in instead and saved back as above, and the launcher says so, naming the path and the error.
- **deleting the path** (a framework's rotation: Lightning's ``save_top_k``, Hugging Face's ``save_total_limit``
  removing an old checkpoint) removes the link; at its next look the keeper removes the kept copy too, so the kept
  set follows the script's and a resumed run finds only the files the script still had. A path is forgotten only
  when this run saw it (linked or saved it) and it is gone, link and all: a file never seen is left alone.

When a look copies a file. A look stats each declared path (and lists each pattern's folders); a plain file whose
version (device, inode, size, mtime_ns, ctime_ns) is the one kept costs nothing more. Any other is copied:

1. at once when the program has ended (``final``);
2. never while a process of this node holds it open for writing (Linux's ``/proc``, asked only about a file rule 3
   or 4 would copy; one found open is asked about again after :data:`OPEN_RECHECK` s), unless it has not changed
   for :data:`OPEN_QUIET` s (a log a program keeps open all along);
3. at once when it is a new inode where the keeper had its link or another file: a rename put it there whole (or
   its writer has closed it, rule 2). Without ``/proc`` this waits for rule 4;
4. once it is unchanged across two consecutive looks.

Another node's writer (a working folder the nodes share, as on Slurm) is out of this node's ``/proc``: a file it
deletes and writes anew under its name (not a rename) may be copied before it is whole by rule 3, and again once
it is. A look first removes the kept copies of deleted paths, then copies: the kept set holds no more files than
the script had at that look plus the one being copied, and a kept copy outlasts its file by a look.

A copy is never kept half-written: it is made in a temporary file beside the kept copy (``.<name>.<random>`` and
:data:`PARTIAL`), renamed into place only when the file is the version the look judged both when opened and after
the copy (opened afresh, so that a network filesystem checks again); one that changed is left for the next look.

With ``CLOUDDDP_RESUME=never`` (``checkpoint.resume: never``) the kept copies are removed before the program
starts: it begins from scratch, and what it saves is kept for the next run.

It needs nothing but Python's standard library: it is shipped in every code snapshot as ``_cloudddp_keep.py``
next to the in-job launcher, which loads it from there (on every backend but local, Slurm included); it also runs
as ``python _cloudddp_keep.py link|save PATTERN...`` (``python -m cloudddp.injob.keepfiles`` in the local script).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import glob
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, NamedTuple

SHIPPED_AS = "_cloudddp_keep.py"
KEPT = "files"
"""The kept copies' folder inside the checkpoint folder (the shared script's ``ckpt-*.pt`` stay beside it)."""
ROOT = "_root"
"""Where an absolute declared path is kept, under :data:`KEPT`."""
SAVE_EVERY = 1.0
"""Seconds between the launcher's looks for files that replaced their link (or match a pattern)."""
OPEN_QUIET = 30.0
"""Seconds a file a process holds open for writing must stay unchanged to be copied all the same."""
OPEN_RECHECK = 3.0
"""Seconds before a file found open for writing is asked about again (the asking reads every process's files)."""
FINAL_TRIES = 3
"""Copies the final save tries of a file that changes while it is copied."""
PARTIAL = ".cloudddp-partial"
"""The suffix of a copy being made beside its kept copy; one a killed keeper left is removed at the next link."""
PARTIAL_STALE = 60.0
"""Seconds unwritten after which a copy being made is taken for one a killed keeper left."""
TAG = "cloudddp: checkpoint.files:"


class Version(NamedTuple):
    """What a look records of a plain file: which file it is (``dev``, ``ino``) and marks of its contents."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Version:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def same_contents(self, other: Version) -> bool:
        """The same file, not written since (a change of metadata alone, which moves ``ctime``, is no change)."""
        return self[:4] == other[:4]


def is_pattern(path: str) -> bool:
    """The declared path is a glob pattern (``*``, ``?``, ``[``), matched against the files, not linked as is."""
    return glob.has_magic(path)


def matches(declared: Sequence[str], relative: str) -> bool:
    """``relative`` (a file under the working folder, posix) is one of the declared paths or matches a pattern."""
    for path in declared:
        path = path.removeprefix("./")
        if relative == path or (is_pattern(path) and _match(path, relative)):
            return True
    return False


def _match(pattern: str, relative: str) -> bool:
    """``fnmatch`` where ``*`` stays inside one folder and ``**`` crosses folders, as ``glob`` does."""
    parts, names = pattern.split("/"), relative.split("/")
    return _match_parts(parts, names)


def _match_parts(parts: list[str], names: list[str]) -> bool:
    if not parts:
        return not names
    if parts[0] == "**":
        return any(_match_parts(parts[1:], names[i:]) for i in range(len(names) + 1))
    return bool(names) and fnmatch.fnmatchcase(names[0], parts[0]) and _match_parts(parts[1:], names[1:])


def left_behind_notice(files: Sequence[str]) -> str:
    """What a run's end says about the files its script wrote in its working folder, with the fix."""
    names = ", ".join(files)
    verb = "was" if len(files) == 1 else "were"
    it = "it" if len(files) == 1 else "them"
    return f"{names} {verb} written in the working directory and discarded with the run: add {it} to checkpoint.files"


class Keeper:
    """The declared paths of one working folder and the checkpoint folder that keeps them."""

    def __init__(self, declared: Sequence[str], workdir: str | Path, checkpoint_dir: str | Path) -> None:
        self.declared = [d.removeprefix("./") for d in declared]
        self.workdir = Path(workdir).absolute()
        self.kept = Path(checkpoint_dir) / KEPT
        self.seen: dict[Path, tuple[Version, float]] = {}
        """Each plain file at the last look: its version and since when (``time.monotonic``) it has had it."""
        self.saved: dict[Path, Version] = {}
        """A plain file's version when it was last copied: not copied again unchanged."""
        self.known: set[Path] = set()
        """The paths this run linked or saved: one that disappears was deleted by the script."""
        self.held: dict[Path, float] = {}
        """Files found open for writing, until when (``time.monotonic``) they are taken as still open."""
        self.failed: dict[Path, str] = {}
        """Why a file's last copy failed: said once, not at every look while it lasts."""

    # -- where things are ------------------------------------------------------------------------
    def place(self, declared: str) -> Path:
        """Where the script sees ``declared`` (a path, or a pattern's folder part)."""
        return Path(declared) if os.path.isabs(declared) else self.workdir / declared

    def kept_copy(self, path: Path) -> Path:
        """Where the file at ``path`` (absolute) is kept."""
        try:
            return self.kept / path.relative_to(self.workdir)
        except ValueError:
            return self.kept / ROOT / path.relative_to(path.anchor)

    def _kept_matches(self, pattern: str) -> Iterator[Path]:
        """The kept copies matching ``pattern``, as the paths the script sees."""
        absolute = os.path.isabs(pattern)
        base = self.kept / ROOT if absolute else self.kept
        relative = pattern.lstrip("/") if absolute else pattern
        for found in sorted(glob.glob(os.path.join(glob.escape(str(base)), relative), recursive=True)):
            if os.path.isfile(found) and not found.endswith(PARTIAL):
                inside = Path(found).relative_to(base)
                yield (Path("/") / inside) if absolute else self.workdir / inside

    def _plain_matches(self, pattern: str) -> Iterator[tuple[Path, os.stat_result]]:
        """Plain files (not links) the script made that match ``pattern``."""
        for found in sorted(glob.glob(str(self.place(pattern)), recursive=True)):
            plain = _plain(Path(found))
            if plain is not None:
                yield Path(found), plain

    # -- before the program starts ---------------------------------------------------------------
    def link(self, *, fresh: bool = False) -> list[str]:
        """Make every declared path resolve into the checkpoint folder; ``fresh``: remove the kept copies first
        (``checkpoint.resume: never``). Returns what the person should know (a path that could not be linked)."""
        notes: list[str] = []
        with self._lock():
            if fresh and self.kept.is_dir():
                shutil.rmtree(self.kept)
            self.kept.mkdir(parents=True, exist_ok=True)
            self._remove_partial_copies()
            for declared in self.declared:
                paths = self._kept_matches(declared) if is_pattern(declared) else [self.place(declared)]
                for path in paths:
                    notes += self._link_one(path)
        return notes

    def _link_one(self, path: Path) -> list[str]:
        kept = self.kept_copy(path)
        kept.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            if os.readlink(path) == str(kept):
                self.known.add(path)  # linked already: by the batch script, or by another process of this node
                return []
            path.unlink()
        elif path.is_file():  # shipped with the code, or left by an earlier start in this folder
            newer = not kept.exists() or path.stat().st_mtime > kept.stat().st_mtime  # the newer one is the progress
            if newer and not _copy_atomic(path, kept):
                return [f"{TAG} {path} changed while it was copied into {kept}: left as it is, not linked"]
            path.unlink()
        elif path.exists():
            return [f"{TAG} {path} is a folder: declare the files in it (e.g. {path.name}/**)"]
        self.known.add(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(kept, path)
            return []
        except OSError as e:
            if kept.is_file():
                shutil.copyfile(kept, path)
            why = e.strerror or e
            return [f"{TAG} {path} cannot be a link to {kept} ({why}): copied in, saved back when it changes"]

    def _remove_partial_copies(self) -> None:
        """The temporary copies a keeper killed mid-copy left (one still being written is left alone)."""
        for folder, _, names in os.walk(self.kept):
            for left in [Path(folder, n) for n in names if n.startswith(".") and n.endswith(PARTIAL)]:
                with contextlib.suppress(OSError):
                    if left.lstat().st_mtime < time.time() - PARTIAL_STALE:
                        left.unlink()

    # -- while it runs and when it ends ----------------------------------------------------------
    def save(self, *, final: bool = False) -> list[str]:
        """One look: remove the kept copies of deleted paths, then copy every file that stands where a link should
        (a rename replaced it, a pattern's new match, a path that could not be linked) once it is settled (the
        module's docstring says when), or at once when ``final`` (the program has ended). Returns the paths saved."""
        saved: list[str] = []
        with self._lock():
            self._forget_deleted()  # first: the kept set shrinks before it grows
            for path, version in self._due(final=final):
                try:
                    if not self._copy(path, version, tries=FINAL_TRIES if final else 1):
                        continue  # it changed while being copied, or went: the next look sees it again
                except OSError as e:  # a full disk, a vanished folder: said once, and tried again at the next look
                    if self.failed.get(path) != str(e):
                        print(f"{TAG} could not save {path}: {e}", file=sys.stderr, flush=True)
                    self.failed[path] = str(e)
                    continue
                self.failed.pop(path, None)
                saved.append(str(path))
        return saved

    def _due(self, *, final: bool) -> list[tuple[Path, Version]]:
        """This look's plain files whose version is not kept yet and that are to be copied now."""
        now = time.monotonic()
        looked: dict[Path, tuple[Version, float]] = {}
        settled: list[tuple[Path, Version]] = []
        replacing: list[tuple[Path, Version]] = []
        for path, found in self._plain_files():
            version = Version.of(found)
            before = self.seen.get(path)
            unchanged = before is not None and before[0] == version
            looked[path] = (version, before[1] if before is not None and unchanged else now)
            if self.saved.get(path) == version:
                continue
            if final or unchanged:
                settled.append((path, version))
            elif (path in self.known) if before is None else before[0][:2] != version[:2]:
                replacing.append((path, version))  # a new inode where its link or another file was; the rest
                # were written in place since the last look, or are new matches: not settled yet
        self.seen = looked
        self.held = {p: until for p, until in self.held.items() if p in looked}
        if final:
            return settled
        held = self._held_open([p for p, _ in settled + replacing], now)
        if held is None:  # no /proc to ask: a file is settled once two looks saw it unchanged
            return settled
        quiet = [(p, v) for p, v in settled if p in held and now - looked[p][1] >= OPEN_QUIET]
        return [(p, v) for p, v in settled + replacing if p not in held] + quiet

    def _held_open(self, paths: list[Path], now: float) -> set[Path] | None:
        """Which of ``paths`` a process of this node holds open for writing (None: unknowable); taken as such, one
        found open is asked about again only after :data:`OPEN_RECHECK` seconds."""
        held = {p for p in paths if self.held.get(p, 0.0) > now}
        ask = [p for p in paths if p not in held]
        found = open_for_writing(ask) if ask else set()
        if found is None:
            return None
        self.held.update(dict.fromkeys(found, now + OPEN_RECHECK))
        return held | found

    def _copy(self, path: Path, version: Version, *, tries: int) -> bool:
        """Copy ``path``, the ``version`` a look judged, into its kept copy; a version that changes while it is
        copied is left (False), or, with ``tries`` left, the one there then is copied instead."""
        for _ in range(tries):
            if _copy_atomic(path, self.kept_copy(path), version):
                self.saved[path] = version
                self.known.add(path)
                return True
            if (now := _plain(path)) is None:
                return False
            version = Version.of(now)
        return False

    def _forget_deleted(self) -> None:
        """Remove the kept copy of every known path the script deleted (and the folders that leaves empty)."""
        for path in [p for p in self.known if not os.path.lexists(p)]:
            self.known.discard(path)
            self.saved.pop(path, None)
            kept = self.kept_copy(path)
            with contextlib.suppress(FileNotFoundError):
                kept.unlink()
            folder = kept.parent
            while folder != self.kept and self.kept in folder.parents:
                try:
                    folder.rmdir()  # only while empty: another kept file in it stops the walk
                except OSError:
                    break
                folder = folder.parent

    def _plain_files(self) -> list[tuple[Path, os.stat_result]]:
        """The plain files standing at the declared paths or matching a pattern, each with its ``lstat``."""
        found: dict[Path, os.stat_result] = {}
        for declared in self.declared:
            if is_pattern(declared):
                found.update(self._plain_matches(declared))
            elif (plain := _plain(self.place(declared))) is not None:
                found[self.place(declared)] = plain
        return list(found.items())

    def keep_saving(self, every: float = SAVE_EVERY) -> threading.Event:
        """Look every ``every`` seconds in a background thread while this process lives, or until the event is set."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every):
                try:
                    self.save()
                except OSError as e:  # the lock's folder: must not stop the training; the final save tries again
                    print(f"{TAG} saving failed: {e}", file=sys.stderr, flush=True)

        threading.Thread(target=loop, name="cloudddp-keep", daemon=True).start()
        return stop

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """One process of a node at a time (every process of a node runs the launcher): a lock in this node's
        temporary folder, named after the working folder."""
        import fcntl

        digest = hashlib.sha256(str(self.workdir).encode()).hexdigest()[:16]
        where = _private_folder() / f"keep-{digest}.lock"
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


@functools.lru_cache(maxsize=1)
def _private_folder() -> Path:
    """``<tmp>/cloudddp-<uid>``, created 0700 and used only while it is a real folder of this user's alone (the
    shipped launcher's, :func:`cloudddp.injob.shim.private_folder`): a lock at a fixed name in a shared /tmp, made
    and held by another user, stalled the saving. Otherwise a fresh private folder (no lock shared with the node's
    other processes then: each save still replaces its file whole)."""
    base = Path(tempfile.gettempdir()) / f"cloudddp-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    st = os.lstat(base)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
        return base
    print(f"{TAG} not using {base}: it is not this user's alone", file=sys.stderr, flush=True)
    return Path(tempfile.mkdtemp(prefix="cloudddp-keep-"))


def _plain(path: Path) -> os.stat_result | None:
    """``path``'s ``lstat`` when it is a plain file (not a link, not a folder); None when it is not, or is gone."""
    try:
        found = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return found if stat.S_ISREG(found.st_mode) else None


def _copy_atomic(source: Path, destination: Path, version: Version | None = None) -> bool:
    """``source`` copied to ``destination`` through a temporary file beside it, renamed into place only when
    ``source`` was ``version`` (when given) as it was opened and is still that file, unwritten, after the copy;
    False, and nothing kept, when it changed or went."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=PARTIAL)
    try:
        with os.fdopen(fd, "wb") as out:
            whole = _copy_unchanged(source, out, version)
        if not whole:
            os.unlink(tmp)
            return False
        with contextlib.suppress(OSError):  # a mounted blob store may keep no times or modes
            shutil.copystat(source, tmp)
        os.replace(tmp, destination)
        return True
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _copy_unchanged(source: Path, out: IO[bytes], version: Version | None) -> bool:
    """Copy ``source`` into ``out``: True when it was ``version`` (when given) as opened and, opened afresh after
    the copy (a network filesystem checks its attributes again), is still that file, unwritten."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO swapped in must not hang the look
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "rb") as src:
        found = os.fstat(fd)
        opened = Version.of(found)
        if not stat.S_ISREG(found.st_mode) or (version is not None and not opened.same_contents(version)):
            return False
        shutil.copyfileobj(src, out)
        out.flush()
        os.fsync(out.fileno())
    try:
        with open(source, "rb", buffering=0) as again:
            return Version.of(os.fstat(again.fileno())).same_contents(opened)
    except FileNotFoundError:
        return False


def open_for_writing(paths: Sequence[Path]) -> set[Path] | None:
    """Which of ``paths`` a process this user may look into (the node's, under Linux's ``/proc``) holds open for
    writing; None where there is no ``/proc`` to ask. It reads every such process's open files: asked only about
    files a look would copy."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    wanted: dict[str, Path] = {}
    for path in paths:
        with contextlib.suppress(OSError):
            wanted[os.path.realpath(path)] = path
    found: set[Path] = set()
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # another user's process, or one that ended
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                held = wanted.get(os.readlink(f"/proc/{pid}/fd/{fd}"))
                if held is not None and held not in found and _writing(f"/proc/{pid}/fdinfo/{fd}"):
                    found.add(held)
    return found


def _writing(fdinfo: str) -> bool:
    """The open file ``fdinfo`` describes was opened for writing (its ``flags``, octal)."""
    with contextlib.suppress(OSError, ValueError, IndexError, StopIteration), open(fdinfo) as info:
        flags = next(line for line in info if line.startswith("flags:"))
        return int(flags.split()[1], 8) & 3 != os.O_RDONLY  # Linux's O_ACCMODE (not in every Python's os)
    return False


def from_environment(declared: Sequence[str], workdir: str | Path = ".") -> Keeper | None:
    """The keeper of ``declared`` for this process: the checkpoint folder from ``CLOUDDDP_CHECKPOINT_DIR``
    (None when nothing is declared or checkpointing is off)."""
    folder = os.environ.get("CLOUDDDP_CHECKPOINT_DIR")
    if not declared or not folder:
        return None
    return Keeper(declared, workdir, folder)


def main(argv: list[str]) -> int:
    """``_cloudddp_keep.py link|save PATTERN...`` in the working folder."""
    if len(argv) < 2 or argv[0] not in ("link", "save"):
        print(f"usage: {SHIPPED_AS} link|save PATTERN...", file=sys.stderr)
        return 2
    keeper = from_environment(argv[1:])
    if keeper is None:
        print(f"{TAG} CLOUDDDP_CHECKPOINT_DIR is not set: nothing is kept", file=sys.stderr)
        return 0
    if argv[0] == "link":
        for note in keeper.link(fresh=os.environ.get("CLOUDDDP_RESUME") == "never"):
            print(note, flush=True)
    else:
        for path in keeper.save(final=True):
            print(f"{TAG} saved {path} (it had replaced its link)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
