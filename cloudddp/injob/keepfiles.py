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
  the checkpoint folder (a temporary copy there, renamed into place, so a kept copy is never half-written); the
  in-job launcher does it every :data:`SAVE_EVERY` seconds once a file has stopped changing, and always when the
  program ends. Work between the last save and a hard kill (SIGKILL, a lost node) is lost.
- **a pattern** (``state/*.json``, ``runs/**``): nothing to link before the files exist, so the kept files that
  match are linked at start and new matches are saved as above (restore-and-save).
- **a working folder where no link can be made** (a read-only or link-less filesystem): the kept copy is copied
  in instead and saved back as above, and the launcher says so, naming the path and the error.
- **deleting the path** (a framework's rotation: Lightning's ``save_top_k``, Hugging Face's ``save_total_limit``
  removing an old checkpoint) removes the link; at its next look the keeper removes the kept copy too, so the kept
  set follows the script's and a resumed run finds only the files the script still had. A path is forgotten only
  when this run saw it (linked or saved it) and it is gone, link and all: a file never seen is left alone.

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
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

SHIPPED_AS = "_cloudddp_keep.py"
KEPT = "files"
"""The kept copies' folder inside the checkpoint folder (the shared script's ``ckpt-*.pt`` stay beside it)."""
ROOT = "_root"
"""Where an absolute declared path is kept, under :data:`KEPT`."""
SAVE_EVERY = 30.0
"""Seconds between the launcher's looks for files that replaced their link (or match a pattern)."""
TAG = "cloudddp: checkpoint.files:"


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
        self.seen: dict[Path, tuple[float, int]] = {}
        """A plain file's (mtime, size) at the last look: saved once it stops changing."""
        self.saved: dict[Path, tuple[float, int]] = {}
        """A plain file's (mtime, size) when it was last saved: not copied again unchanged."""
        self.known: set[Path] = set()
        """The paths this run linked or saved: one that disappears was deleted by the script."""

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
            if os.path.isfile(found):
                inside = Path(found).relative_to(base)
                yield (Path("/") / inside) if absolute else self.workdir / inside

    def _plain_matches(self, pattern: str) -> Iterator[Path]:
        """Plain files (not links) the script made that match ``pattern``."""
        for found in sorted(glob.glob(str(self.place(pattern)), recursive=True)):
            path = Path(found)
            if path.is_file() and not path.is_symlink():
                yield path

    # -- before the program starts ---------------------------------------------------------------
    def link(self, *, fresh: bool = False) -> list[str]:
        """Make every declared path resolve into the checkpoint folder; ``fresh``: remove the kept copies first
        (``checkpoint.resume: never``). Returns what the person should know (a path that could not be linked)."""
        notes: list[str] = []
        with self._lock():
            if fresh and self.kept.is_dir():
                shutil.rmtree(self.kept)
            self.kept.mkdir(parents=True, exist_ok=True)
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
                return []
            path.unlink()
        elif path.is_file():  # shipped with the code, or left by an earlier start in this folder
            if not kept.exists() or path.stat().st_mtime > kept.stat().st_mtime:
                _copy_atomic(path, kept)  # the newer of the two is the progress
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

    # -- while it runs and when it ends ----------------------------------------------------------
    def save(self, *, final: bool = False) -> list[str]:
        """Copy into the checkpoint folder every file that stands where a link should (a rename replaced it, a
        pattern's new match, a path that could not be linked): at once when ``final`` (the program has ended),
        else once it has not changed since the last look. Returns the paths saved."""
        saved: list[str] = []
        with self._lock():
            for path in self._plain_files():
                try:
                    stat = path.stat()
                    now = (stat.st_mtime, stat.st_size)
                    settled = self.seen.get(path) == now
                    self.seen[path] = now
                    if self.saved.get(path) == now or not (final or settled):
                        continue
                    _copy_atomic(path, self.kept_copy(path))
                except OSError as e:  # a full disk, a vanished file: said, and tried again at the next look
                    print(f"{TAG} could not save {path}: {e}", file=sys.stderr, flush=True)
                    continue
                self.saved[path] = now
                self.known.add(path)
                saved.append(str(path))
            self._forget_deleted()
        return saved

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

    def _plain_files(self) -> list[Path]:
        found: dict[Path, None] = {}
        for declared in self.declared:
            if is_pattern(declared):
                found.update(dict.fromkeys(self._plain_matches(declared)))
            else:
                path = self.place(declared)
                if path.is_file() and not path.is_symlink():
                    found[path] = None
        return list(found)

    def keep_saving(self, every: float = SAVE_EVERY) -> None:
        """Save every ``every`` seconds in a background thread, for as long as this process lives."""

        def loop() -> None:
            while True:
                time.sleep(every)
                try:
                    self.save()
                except OSError as e:  # the lock's folder: must not stop the training; the final save tries again
                    print(f"{TAG} saving failed: {e}", file=sys.stderr, flush=True)

        threading.Thread(target=loop, name="cloudddp-keep", daemon=True).start()

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
    import stat

    base = Path(tempfile.gettempdir()) / f"cloudddp-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    st = os.lstat(base)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
        return base
    print(f"{TAG} not using {base}: it is not this user's alone", file=sys.stderr, flush=True)
    return Path(tempfile.mkdtemp(prefix="cloudddp-keep-"))


def _copy_atomic(source: Path, destination: Path) -> None:
    """``source`` copied to ``destination`` through a temporary file beside it, renamed into place."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(OSError):  # a mounted blob store may keep no times or modes
            shutil.copystat(source, tmp)
        os.replace(tmp, destination)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
