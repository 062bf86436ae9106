"""The user configuration and the state folder as a second Unix user would attack them: she swaps the victim's
configuration in a folder she owns while it is read, and links point a home or a configuration at a folder she owns
or anyone may write in."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.backends.plugins import SECTIONS
from cloudddp.paths import UnsafeFolder
from cloudddp.spec.userconfig import read_config
from tests.support import users
from tests.support.cli import cli

TRIES = 200

_SWAP = r"""
import os, sys
os.chdir(sys.argv[1])
swaps = 0
while not os.path.exists("stop"):
    os.rename("config.yaml", "victims.yaml"); os.rename("mine.yaml", "config.yaml")
    os.rename("config.yaml", "mine.yaml"); os.rename("victims.yaml", "config.yaml")
    swaps += 1
print(swaps, flush=True)
"""


@pytest.fixture
def other() -> users.OtherUser:
    return users.required("a second user swapping a configuration")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder both users reach (the test's own tmp_path is closed to her)."""
    folder = Path(tempfile.mkdtemp(prefix="cloudddp-config-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def hers(shared: Path, other: users.OtherUser, name: str, mode: int = 0o755) -> Path:
    folder = shared / name
    folder.mkdir()
    folder.chmod(mode)
    os.chown(folder, other.uid, other.gid)
    return folder


def test_a_second_user_swapping_the_configuration_in_her_folder_gets_nothing_read_and_nothing_run(
    shared: Path, other: users.OtherUser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = hers(shared, other, "hers")
    config = folder / "config.yaml"
    config.write_text("local: {device: cpu}\n")  # the victim's, in her folder
    config.chmod(0o600)
    ran = tmp_path / "ran"
    mine = folder / "mine.yaml"
    mine.write_text(f"slurm:\n  login_host: nohost.invalid\n  ssh_options: [-o, 'ProxyCommand=touch {ran}']\n")
    mine.chmod(0o644)
    os.chown(mine, other.uid, other.gid)
    swapper = subprocess.Popen(
        ["setpriv", f"--reuid={other.uid}", f"--regid={other.gid}", "--clear-groups"]
        + [sys.executable, "-I", "-S", "-c", _SWAP, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )
    monkeypatch.setenv("CLOUDDDP_CONFIG", str(config))
    refused = []
    try:
        for _ in range(TRIES):
            with pytest.raises(UnsafeFolder) as caught:
                read_config(SECTIONS)
            refused.append(str(caught.value))
        checked = [cli("check", "-b", "slurm", env={"CLOUDDDP_CONFIG": str(config)}) for _ in range(3)]
    finally:
        (folder / "stop").touch()
        swaps = int((swapper.communicate(timeout=30)[0] or "0").strip() or 0)
    assert swaps > TRIES, f"she swapped only {swaps} times: the race was not run"
    assert len(refused) == TRIES and all(
        f"the folder {folder} on its path belongs to another user" in r for r in refused
    )
    for result in checked:
        assert result.returncode == 2 and "belongs to another user" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not ran.exists(), "her ProxyCommand ran as the victim"


def test_a_linked_home_or_configuration_pointing_at_an_open_or_foreign_folder_is_refused(
    shared: Path, other: users.OtherUser, tmp_path: Path
) -> None:
    open_folder = shared / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)  # anyone may replace what it holds
    foreign = hers(shared, other, "foreign")
    for parent, why in ((open_folder, "is writable by others (mode 777)"), (foreign, "belongs to another user")):
        target = parent / "home"
        target.mkdir(mode=0o700)  # the victim's own, 0700: only its folder is not
        link = tmp_path / f"home-to-{parent.name}"
        link.symlink_to(target)
        result = cli("list", env={"CLOUDDDP_HOME": str(link)})
        assert result.returncode == 2 and f"the folder {parent} on its path {why}" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and not list(target.iterdir()), "state was written there"

        config = parent / "config.yaml"
        config.write_text("local: {device: cpu}\n")
        config.chmod(0o600)
        linked = tmp_path / f"config-to-{parent.name}.yaml"
        linked.symlink_to(config)
        with pytest.raises(UnsafeFolder, match=re.escape(f"the folder {parent} on its path {why}")):
            read_config(SECTIONS, linked)


def test_a_configuration_in_a_sticky_folder_is_read_and_a_link_she_planted_there_is_refused(
    shared: Path, other: users.OtherUser, tmp_path: Path
) -> None:
    """A sticky folder (as /tmp) lets others add entries but not replace ours, as the kernel treats it: a file of
    ours there is read; a link of hers there is refused, as the kernel refuses to follow it."""
    sticky = shared / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    config = sticky / "config.yaml"
    config.write_text("local: {device: cpu}\n")
    config.chmod(0o600)
    found = read_config(SECTIONS, config)
    assert found is not None and found.settings == {"local": {"device": "cpu"}}
    planted = sticky / "planted.yaml"
    planted.symlink_to(config)
    os.chown(planted, other.uid, other.gid, follow_symlinks=False)
    with pytest.raises(UnsafeFolder, match=re.escape(f"the link {planted} belongs to another user")):
        read_config(SECTIONS, planted)
