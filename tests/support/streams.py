"""Streams that go wrong the ways a checkpoint store's source can, for the stores' and carry's tests."""

from __future__ import annotations

import os

from cloudddp.backends.checkpoints.store import CHUNK


class Breaking:
    """A source stream that breaks after two chunks (a store that went away mid-copy)."""

    def __init__(self) -> None:
        self.given = 0

    def read(self, size: int = -1) -> bytes:
        self.given += 1
        if self.given > 2:
            raise OSError("the source went away")
        return os.urandom(CHUNK)
