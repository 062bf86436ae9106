"""A carry between local checkpoint folders that someone else can write: a second Unix user plants a link in a shared
target, or turns a listed file (or folder) of a source she writes into a link after the listing. The carry follows
neither, names the link, writes nothing outside the target and leaves no file that was not verified."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.backends.checkpoints.carry import carry
from cloudddp.backends.checkpoints.contents import look, resume_note
from cloudddp.backends.checkpoints.store import StoredFile
from cloudddp.backends.local.checkpoint_store import LocalCheckpoints
from cloudddp.errors import CloudDDPError
from cloudddp.observe.console import safe_name
from tests.support import users


@pytest.fixture
def other() -> users.OtherUser:
    return users.required("a second user writing a shared checkpoint folder")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder both users reach (the test's own tmp_path is closed to her)."""
    folder = Path(tempfile.mkdtemp(prefix="cloudddp-shared-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def everything(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, links not followed."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            if not path.is_symlink():
                found[path.relative_to(folder).as_posix()] = path.read_bytes()
    return found


def test_a_link_planted_in_a_shared_target_is_refused_and_nothing_is_written_where_it_points(
    tmp_path: Path, shared: Path, other: users.OtherUser
) -> None:
    private = tmp_path / "ssh"
    private.mkdir(mode=0o700)
    (private / "authorized_keys").write_text("the victim's own key\n")
    source = tmp_path / "from"
    (source / "files").mkdir(parents=True)
    (source / "files" / "authorized_keys").write_text("her key\n")
    target = shared / "target"
    target.mkdir()
    target.chmod(0o777)  # a checkpoint.path others may write in
    planted = other.run(["ln", "-s", str(private), str(target / "files")])
    assert planted.returncode == 0, planted.stderr

    with pytest.raises(CloudDDPError, match=r"files in the checkpoint folder .* is a link") as refused:
        carry(LocalCheckpoints(source), LocalCheckpoints(target))
    assert "Traceback" not in str(refused.value)
    assert everything(private) == {"authorized_keys": b"the victim's own key\n"}
    assert everything(target) == {}


class SwappedAfterListing(LocalCheckpoints):
    """A source she writes: once the carry has listed it, she turns ``swap`` into a link to ``aim``."""

    def __init__(self, folder: Path, user: users.OtherUser, swap: str, aim: Path) -> None:
        super().__init__(folder)
        self.user, self.swap, self.aim = user, swap, aim

    def files(self) -> list[StoredFile]:
        listed = super().files()
        swapped = self.user.run(["sh", "-c", 'rm -rf -- "$1" && ln -s -- "$2" "$1"', "swap", self.swap, str(self.aim)])
        assert swapped.returncode == 0, swapped.stderr
        return listed


@pytest.mark.parametrize("swap", ["a.bin", "files"])
def test_a_source_file_or_folder_that_turns_into_a_link_after_listing_is_refused_and_nothing_of_it_is_carried(
    tmp_path: Path, shared: Path, other: users.OtherUser, swap: str
) -> None:
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "a.bin").write_bytes(b"the victim's private file " * 10)
    (secret / "id_rsa").write_bytes(b"the victim's private key")
    source = shared / "from"
    (source / "files").mkdir(parents=True)
    (source / "a.bin").write_bytes(b"x" * 100)
    (source / "files" / "id_rsa").write_bytes(b"y" * 24)
    (source / "z.bin").write_bytes(b"z" * 10)
    shutil.chown(source, other.uid, other.gid)
    shutil.chown(source / "files", other.uid, other.gid)
    aim = secret / "a.bin" if swap == "a.bin" else secret
    target = tmp_path / "to"

    with pytest.raises(CloudDDPError, match=rf"{swap} in the checkpoint folder .* is a link"):
        carry(SwappedAfterListing(source, other, str(source / swap), aim), LocalCheckpoints(target))
    held = everything(target) if target.exists() else {}
    assert not any(b"victim" in data for data in held.values()), held
    assert all(not name.rsplit("/", 1)[-1].startswith(".") for name in held), held  # no temporary left
    assert set(held) <= {"a.bin"}  # only what was verified before the swapped file came up


HOSTILE = [
    "osc52-\x1b]52;c;aWQgPiAvdG1wL3B3bmVk\x07.bin",  # a clipboard write
    "title-\x1b]0;owned\x07.bin",
    "back\\slash.bin",
    "new\nline.bin",
    "l" * 250,
    "not-utf8-\udcff\udcfe.bin",  # the bytes 0xff 0xfe, as os.fsdecode reads them
]


def test_file_names_with_escapes_backslashes_newlines_250_bytes_and_no_utf8_are_carried_and_printed_safely(
    tmp_path: Path,
) -> None:
    source = tmp_path / "from"
    source.mkdir()
    for name in HOSTILE:
        (source / name).write_bytes(os.fsencode(name))
    carried = carry(LocalCheckpoints(source), LocalCheckpoints(tmp_path / "to"))
    assert sorted(carried.copied) == sorted(HOSTILE)
    assert everything(tmp_path / "to") == {name: os.fsencode(name) for name in HOSTILE}
    note = resume_note(look(tmp_path / "to", shared_script=False, keeps=False), never=False)
    assert "owned" in note or "osc52" in note or "back" in note  # the names are said ...
    assert not any(c in note for c in "\x1b\x07\n") and "\udcff" not in note, repr(note)  # ... none obeyed
    note.encode()  # and it can be written to a UTF-8 terminal
    shown = {safe_name(name) for name in HOSTILE}
    assert len(shown) == len(HOSTILE) and all(name.isprintable() for name in shown), shown
