"""What a code snapshot leaves out: the ignore rules of a folder, compiled once.

Ignore rules: ``.gitignore``, ``.amlignore`` and ``.cloudddpignore`` in the folder, the spec's ``code.ignore``,
and defaults (VCS folders, caches, checkpoints, files that look like credentials); and all of git's rules: in a
git work tree git itself says what it ignores (nested ``.gitignore`` files, the enclosing repository's,
``.git/info/exclude``, ``core.excludesFile``), elsewhere ``.gitignore`` files in subfolders apply to their
subfolder. :func:`ignore_line` writes the line that leaves out one file (for hints and for the job's inputs).

pathspec translates the lines; the defaults' translations are written out here (:data:`TRANSLATED`), so a folder
with no rules of its own, the usual code folder, is checked without importing pathspec (a sixth of a render).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cloudddp.errors import UserError

if TYPE_CHECKING:
    import pathspec

DEFAULT_IGNORES = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    "*.pyc",
    ".ipynb_checkpoints/",
    ".venv/",
    "venv/",
    "node_modules/",
    "checkpoints/",
    "outputs/",
    ".cloudddp/",
    ".DS_Store",
)
SECRET_IGNORES = (".env", "*.pem", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*")
"""Files that look like credentials (dotenv files, PEM keys and certificates, SSH keys): left out by default,
each named in a note; a ``!<path>`` line in .cloudddpignore (or code.ignore) ships one anyway."""
IGNORE_FILES = (".gitignore", ".amlignore", ".cloudddpignore")

TRANSLATED: dict[str, tuple[str, bool]] = {
    ".git/": (r"^(?:.+/)?\.git(?P<ps_d>/)", True),
    ".hg/": (r"^(?:.+/)?\.hg(?P<ps_d>/)", True),
    ".svn/": (r"^(?:.+/)?\.svn(?P<ps_d>/)", True),
    "__pycache__/": (r"^(?:.+/)?__pycache__(?P<ps_d>/)", True),
    "*.pyc": (r"^(?:.+/)?[^/]*\.pyc(?:(?P<ps_d>/)|$)", True),
    ".ipynb_checkpoints/": (r"^(?:.+/)?\.ipynb_checkpoints(?P<ps_d>/)", True),
    ".venv/": (r"^(?:.+/)?\.venv(?P<ps_d>/)", True),
    "venv/": (r"^(?:.+/)?venv(?P<ps_d>/)", True),
    "node_modules/": (r"^(?:.+/)?node_modules(?P<ps_d>/)", True),
    "checkpoints/": (r"^(?:.+/)?checkpoints(?P<ps_d>/)", True),
    "outputs/": (r"^(?:.+/)?outputs(?P<ps_d>/)", True),
    ".cloudddp/": (r"^(?:.+/)?\.cloudddp(?P<ps_d>/)", True),
    ".DS_Store": (r"^(?:.+/)?\.DS_Store(?:(?P<ps_d>/)|$)", True),
    ".env": (r"^(?:.+/)?\.env(?:(?P<ps_d>/)|$)", True),
    "*.pem": (r"^(?:.+/)?[^/]*\.pem(?:(?P<ps_d>/)|$)", True),
    "id_rsa*": (r"^(?:.+/)?id_rsa[^/]*(?:(?P<ps_d>/)|$)", True),
    "id_dsa*": (r"^(?:.+/)?id_dsa[^/]*(?:(?P<ps_d>/)|$)", True),
    "id_ecdsa*": (r"^(?:.+/)?id_ecdsa[^/]*(?:(?P<ps_d>/)|$)", True),
    "id_ed25519*": (r"^(?:.+/)?id_ed25519[^/]*(?:(?P<ps_d>/)|$)", True),
}
"""pathspec's translation of each default line (``GitIgnoreSpecPattern.pattern_to_regex``), as it gives it: a test
holds the two to the same, and a line of no default is translated by pathspec itself."""


def _translated(line: str) -> tuple[str | None, bool | None]:
    """The line's regex and whether it leaves out (False: it ships again; None: a comment or a blank line)."""
    known = TRANSLATED.get(line)
    if known is not None:
        return known
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern  # only for a folder's own rules

    translated: tuple[str | None, bool | None] = GitIgnoreSpecPattern.pattern_to_regex(line)
    return translated


def ignore_lines(root: Path, extra: Sequence[str]) -> list[str]:
    """The folder's own rules, in the order they apply: the defaults, its ignore files, then ``extra``."""
    lines = [*DEFAULT_IGNORES, *SECRET_IGNORES]  # first, so the folder's own negations can ship one
    for name in IGNORE_FILES:
        path = root / name
        if path.is_file():
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    return lines + list(extra)


_ANYWHERE = "^(?:.+/)?"
"""How pathspec's regex of a line without a slash in it starts: the name, in any folder."""


def _any_of(regexes: Sequence[str]) -> str:
    """A regex that matches where one of ``regexes`` does, the prefix they all share (:data:`_ANYWHERE`, as the
    defaults' do) said once: Python compiles it in a third of the time."""
    if regexes and all(regex.startswith(_ANYWHERE) for regex in regexes):
        return _ANYWHERE + "(?:" + "|".join(f"(?:{regex[len(_ANYWHERE) :]})" for regex in regexes) + ")"
    return "|".join(f"(?:{regex})" for regex in regexes) or "(?!)"


class _Ignored:
    """Whether a path is ignored: GitIgnoreSpec's answer. Without negated lines (the usual case) that is
    "any line matches", asked of one regex made of every line's (pathspec's own translation of each), compiled
    once; GitIgnoreSpec itself is built only where that cannot answer, or to word a line that does not compile."""

    _GROUP = re.compile(r"\(\?P<\w+>")

    def __init__(self, lines: Sequence[str]) -> None:
        self._lines = list(lines)
        self.combined: re.Pattern[str] | None = None
        try:
            translated = [_translated(line) for line in self._lines]
        except ValueError as e:  # a bad line ("!" alone)
            raise _invalid(e) from None
        active = [(regex, include) for regex, include in translated if include is not None]
        if all(include for _, include in active):
            with contextlib.suppress(re.error):  # a reversed character range: GitIgnoreSpec says which line
                self.combined = re.compile(_any_of([self._GROUP.sub("(?:", str(regex)) for regex, _ in active]))
        if self.combined is None:
            _ = self.spec  # built now, so that a line that does not compile is refused here

    @functools.cached_property
    def spec(self) -> pathspec.GitIgnoreSpec:
        import pathspec  # only where the combined regex cannot answer

        try:
            return pathspec.GitIgnoreSpec.from_lines(self._lines)
        except (ValueError, re.error) as e:  # a bad line, or one whose character range is reversed
            raise _invalid(e) from None

    def __call__(self, rel: str) -> bool:
        if self.combined is not None:
            return self.combined.search(rel) is not None
        return self.spec.match_file(rel)


def _invalid(e: Exception) -> UserError:
    return UserError(
        f"an ignore rule is not a valid pattern: {e}",
        hint="check .gitignore, .amlignore and .cloudddpignore in the code folder, and code.ignore",
    )


def git_ignored(root: Path) -> set[str] | None:
    """What git ignores under ``root`` (paths relative to it; a wholly ignored folder as ``dir/``), when
    ``root`` is in a git work tree and git is installed; None otherwise. Git's answer covers every rule it
    has: nested ``.gitignore`` files, the enclosing repository's, ``.git/info/exclude``, ``core.excludesFile``."""
    git = shutil.which("git")
    if git is None or not _in_a_repository(root):
        return None
    import subprocess  # here: a folder outside any repository (a fresh copy, a scratch folder) spares its import

    try:  # one call: outside a work tree (no repository, a bare one, inside .git) ls-files fails, and None says so
        listed = subprocess.run(
            [git, "-C", str(root), "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z"]
            + ["--", "."],
            capture_output=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    return {os.fsdecode(path) for path in listed.stdout.split(b"\0") if path}


def _in_a_repository(root: Path) -> bool:
    """Whether git may find a repository for ``root``: ``GIT_DIR`` is set, or ``.git`` (a folder, or the file of a
    linked work tree or submodule) is in it or a folder above. Asked before git is run, which takes longer."""
    return "GIT_DIR" in os.environ or any(os.path.lexists(folder / ".git") for folder in (root, *root.parents))


class Rules:
    """Whether the scan leaves a path out: the folder's own rules (:class:`_Ignored`) and git's. In a git work
    tree git's list answers; elsewhere each ``.gitignore`` below the top applies to its own folder (pathspec's
    gitignore semantics within it; a deeper file cannot re-include what a shallower one ignores)."""

    def __init__(self, root: Path, lines: Sequence[str]) -> None:
        self.own = _Ignored(lines)
        self.git = git_ignored(root)
        self.nested: dict[str, _Ignored] = {}  # folder ("sub/") -> its .gitignore, outside a git work tree
        self._lines = lines
        self._without_secret: _Ignored | None = None

    def enter(self, rel_dir: str, here: str) -> None:
        """Note the ``.gitignore`` of folder ``rel_dir`` (outside a git work tree; git reads its own)."""
        if self.git is None and rel_dir:
            path = Path(here) / ".gitignore"
            if path.is_file():
                self.nested[rel_dir] = _Ignored(path.read_text(encoding="utf-8", errors="replace").splitlines())

    def __call__(self, rel: str) -> bool:
        if self.own(rel) or (self.git is not None and rel in self.git):
            return True
        nested = self.nested.items()
        return bool(nested) and any(rel.startswith(folder) and rules(rel[len(folder) :]) for folder, rules in nested)

    def matcher(self) -> Callable[[str], object]:
        """What :meth:`__call__` answers (truthy: left out), asked the quickest way that holds until :meth:`enter`
        next adds a folder's rules: the folder's own regex and git's list, without the nested rules' loop."""
        own = self.own.combined
        if own is None or self.nested:
            return self
        if self.git is None:
            return own.search
        search, git = own.search, self.git
        return lambda rel: search(rel) or rel in git

    def looks_secret(self, rel: str) -> bool:
        """Left out by the credential defaults alone (not by a rule of the folder's or git's)."""
        if not _secret_rules()(rel):
            return False
        if self._without_secret is None:
            secret = set(SECRET_IGNORES)
            self._without_secret = _Ignored([line for line in self._lines if line not in secret])
        return not self._without_secret(rel) and not (self.git is not None and rel in self.git)


@functools.cache
def _secret_rules() -> _Ignored:
    """:data:`SECRET_IGNORES` alone, compiled when a left-out file is first asked about."""
    return _Ignored(SECRET_IGNORES)


def ignore_line(rel: str) -> str:
    """The .gitignore-style line that leaves out the file ``rel``: anchored, wildcards escaped.

    Exactly that file, unless its name holds characters no ignore line can spell (a newline, other
    control or separator characters): each of those becomes ``?``, which also matches one other character.
    """
    line = "".join("\\" + c if c in "\\*?[]" else c if c.isprintable() else "?" for c in rel)
    spaces = len(line) - len(line.rstrip(" "))  # trailing spaces would be stripped unless escaped
    return "/" + line[: len(line) - spaces] + "\\ " * spaces
