"""A second, unprivileged Unix user on this machine, for tests of what another user can and cannot do (root only).

The user is created once (``useradd --system``, no home, no login shell) and kept: creating and deleting a
user per test would cost more than the test. Commands run as it through ``setpriv`` with its own uid, gid
and no supplementary groups, so they have exactly the rights of a stranger on the machine.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass

from tests.support.rigs import rig_unavailable

NAME = "cloudddp-other"


@dataclass(frozen=True)
class OtherUser:
    name: str
    uid: int
    gid: int

    def run(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``argv`` as this user, from ``/`` with a minimal environment (nothing of ours leaks to it)."""
        return subprocess.run(
            ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *argv],
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "HOME": "/"},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def python(self, code: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``code`` in this interpreter (standard library only: the user may not read our site-packages)."""
        return self.run([sys.executable, "-I", "-S", "-c", code, *args])


def unavailable() -> str | None:
    """Why a second user cannot be had here, or None."""
    if os.geteuid() != 0:
        return "needs root to create a second Unix user (useradd) and to run commands as it (setpriv)"
    for tool in ("useradd", "setpriv"):
        if shutil.which(tool) is None:
            return f"needs {tool} (shadow-utils / util-linux) to act as a second user"
    return None


def required(what: str) -> OtherUser:
    """The second user for a test of ``what``; where none can be had, the test is skipped, and on CI it fails
    (:func:`tests.support.rigs.rig_unavailable`): a second-user guarantee must not go unproven silently."""
    reason = unavailable()
    if reason:
        rig_unavailable(f"{what}: {reason}")
    return other_user()


def other_user() -> OtherUser:
    """The second user, created when it does not exist yet."""
    try:
        entry = pwd.getpwnam(NAME)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NAME],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(NAME)
    return OtherUser(NAME, entry.pw_uid, entry.pw_gid)
