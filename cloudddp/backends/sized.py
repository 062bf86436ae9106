"""A backend whose sizes come from the catalog (SageMaker's instance types, Azure ML's VM sizes).

It says where its sizes come from (its ``_size_target`` hook), and its plans name the sizes a recovery
with ``limits.recover_to: next_size`` would move to, from the catalog's ranking. Backends that choose no size
(local, Slurm) stay on :class:`~cloudddp.backends.base.Backend`, which imports nothing of the catalog's
selection, cost model or measured step times.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from cloudddp.backends.base import Backend, OptionsT
from cloudddp.backends.checks import MissingSetting
from cloudddp.catalog.ranking import next_size_notes
from cloudddp.catalog.target import SizeTarget
from cloudddp.spec.model import JobSpec


class SizedBackend(Backend[OptionsT]):
    cpu_size_example: ClassVar[tuple[str, str]] = ("", "")
    """A CPU size to suggest for a CPU job, which must name its size (the catalog ranks GPU sizes only), and a
    word about it and another."""

    def _missing_settings(self, spec: JobSpec) -> list[MissingSetting]:
        target = self._size_target(spec)
        if spec.resources.gpus_per_node or target.named:
            return []
        size, about = self.cpu_size_example
        what = f"a CPU size, as resources.gpus_per_node is 0 and cloudddp ranks GPU sizes only; {about}"
        return [MissingSetting(target.field, what, size)]

    @abc.abstractmethod
    def _size_target(self, spec: JobSpec) -> SizeTarget:
        """Where this backend's sizes come from for ``spec``: the catalog's cloud and the size the spec names."""

    def _recovery_notes(self, spec: JobSpec) -> tuple[list[str], list[str]]:
        return next_size_notes(self.name, self._size_target(spec), spec)
