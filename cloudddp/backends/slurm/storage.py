"""What a user's runs left in the working folder on the cluster (``cloudddp storage``).

:func:`survey` lists every entry of the working folder's sub-folders (:mod:`.workdir` says what each holds) with
its size, whether a live job of the user's uses it (its run folder, or a path its script names) and whether
anything in it changed lately (a submit under way uploads and builds before its job exists); :func:`remove`
removes the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cloudddp.backends.slurm.shell import Shell
from cloudddp.errors import CloudDDPError

KINDS = ("runs", "envs", "images", "code", "checkpoints")
"""The working folder's sub-folders, each entry of which is one thing a run left."""
# Lists each entry (KiB, changed within $2 minutes or not, the name a link points to, path), then each live job
# of the user's with its script: NUL-separated sections. squeue failing is exit 3 (nothing is known unused then).
_LIST = r"""
cd -- "$1" 2>/dev/null || exit 0
live=$(squeue -h --me -M all -o %j 2>/dev/null || squeue -h --me -o %j) || exit 3  # -M all: with slurmdbd
for kind in runs envs images code checkpoints; do
  for e in "$kind"/*; do
    [ -e "$e" ] || continue
    fresh=$(find "$e" -mmin "-$2" -print -quit 2>/dev/null)
    link=$(readlink -- "$e")
    printf '%s\t%s\t%s\t%s\n' "$(du -sk -- "$e" | cut -f1)" "${fresh:+1}" "${link##*/}" "$e"
  done
done
printf '%s\n' "$live" | while IFS= read -r name; do
  [ -n "$name" ] && [ -f "runs/$name/job.sbatch" ] && { printf '\0%s\n' "$name"; cat -- "runs/$name/job.sbatch"; }
done
exit 0
"""
_NAME_CHAR = r"[\w.+=@-]"


@dataclass(frozen=True)
class Entry:
    """One thing the user's runs left in the working folder."""

    path: str
    """``<kind>/<name>`` under the working folder."""
    kib: int
    fresh: bool
    """Something in it changed within the survey's minutes (a submit may be under way)."""
    used_by: str | None
    """The live job (its run id) that uses it, or None."""

    @property
    def kind(self) -> str:
        return self.path.partition("/")[0]

    def removable(self, checkpoints: bool) -> bool:
        return self.used_by is None and not self.fresh and (checkpoints or self.kind != "checkpoints")


def survey(shell: Shell, folder: str, minutes: int) -> list[Entry]:
    """Every entry under ``folder``'s sub-folders, largest first, with who uses it."""
    done = shell.run(["bash", "-c", _LIST, "cloudddp-storage", folder, str(minutes)], timeout=600, check=False)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()
        raise CloudDDPError(f"could not list {folder} {shell.where}: {said or f'exit {done.returncode}'}")
    listing, *jobs = done.stdout.decode(errors="replace").split("\0")
    scripts = {name: script for name, _, script in (job.partition("\n") for job in jobs)}
    found = [line.split("\t", 3) for line in listing.splitlines()]
    users = {path: _user(folder, path, scripts) for _, _, _, path in found}
    for _, _, link, path in found:  # what a used link points to is used (an environment's build)
        if link and users[path]:
            users[f"{path.partition('/')[0]}/{link}"] = users[path]
    entries = [
        Entry(path, int(kib or 0), fresh == "1", users[path] or users.get(_owner(path)))
        for kib, fresh, _, path in found
    ]
    return sorted(entries, key=lambda e: (-e.kib, e.path))


def _owner(path: str) -> str:
    """The entry a lock or a partial import belongs to (``envs/K.lock``: ``envs/K``; ``images/I.part-7``)."""
    return re.sub(r"\.(lock|link|part-[^/]*)\Z", "", path)


def _user(folder: str, path: str, scripts: dict[str, str]) -> str | None:
    """The live job whose run folder ``path`` is, or whose script names it."""
    named = re.compile(re.escape(f"{folder}/{path}") + f"(?!{_NAME_CHAR})")
    for run_id, script in scripts.items():
        if path == f"runs/{run_id}" or named.search(script):
            return run_id
    return None


def remove(shell: Shell, folder: str, entries: list[Entry]) -> None:
    """Remove ``entries`` (each ``<kind>/<name>`` under ``folder``, as :func:`survey` found it)."""
    paths = []
    for entry in entries:
        kind, _, name = entry.path.partition("/")
        if kind not in KINDS or not name or "/" in name or name in (".", ".."):
            raise CloudDDPError(f"{entry.path} is not an entry of the working folder")
        paths.append(f"{folder}/{entry.path}")
    if paths:
        shell.run(["rm", "-rf", "--", *paths], timeout=600)
