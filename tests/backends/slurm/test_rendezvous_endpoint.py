"""A Slurm rank joins only the rendezvous its own user's node 0 wrote: an endpoint file another Unix user owns, or
a link, is refused before anything connects (the wrapper run as each rank runs it: ``python -c``, ``read``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cloudddp.backends.slurm.agent import STORE
from tests.support import users


def joined(endpoint: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", STORE, str(endpoint), "", "0", "read"], capture_output=True, text=True, timeout=60
    )


def test_an_endpoint_file_another_user_owns_or_a_link_is_refused(tmp_path: Path) -> None:
    other = users.required("a second user writing a rendezvous endpoint")
    endpoint = tmp_path / ".cloudddp-rendezvous"
    endpoint.write_text("127.0.0.1:29500")
    mine = joined(endpoint)
    assert mine.returncode == 0 and mine.stdout.strip() == "127.0.0.1:29500", mine.stderr
    os.chown(endpoint, other.uid, other.gid)  # hers: she chose where the ranks connect
    refused = joined(endpoint)
    assert refused.returncode != 0 and refused.stdout == "", refused
    assert "is not a file of this user: not joining the rendezvous it names" in refused.stderr
    endpoint.unlink()
    real = tmp_path / "elsewhere"
    real.write_text("127.0.0.1:29500")
    endpoint.symlink_to(real)
    linked = joined(endpoint)
    assert linked.returncode != 0 and linked.stdout == "" and "is not a file of this user" in linked.stderr
