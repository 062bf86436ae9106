"""The per-file loops of a code snapshot, in C (``_tarloop.c``): see :mod:`cloudddp.code.scan` and
:mod:`cloudddp.code.tarstream`, whose Python loops are the reference and run where it is not built."""

from collections.abc import Callable
from typing import TypeVar

_E = TypeVar("_E")

def regular_files(
    here: str, rel_dir: str, left: Callable[[str], object], entry: type[_E], stamp: type[tuple[int, ...]]
) -> tuple[list[_E], list[str], list[str]]: ...
def pack(
    batch: bytearray, members: list[tuple[str, str, int, bool, bool, bytes | None]], start: int, chunk: int
) -> int: ...
