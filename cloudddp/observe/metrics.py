"""Metric lines: how every backend gets training metrics back.

Rank 0 of the training script prints one line per measurement::

    CLOUDDDP_METRIC {"epoch":1,"step":40,"time":1732280000.1,"train_loss":0.52,"lr":0.1}

A Hugging Face Trainer's printed log records (``{'loss': 5.3, 'epoch': 0.5}``) are read as records too
(:func:`trainer_record`); the frameworks' log files are turned into metric lines inside the job
(:mod:`cloudddp.injob.framework_logs`).

Every backend can stream logs, so every backend can stream metrics; SageMaker's MetricDefinitions use
:func:`metric_regex` over the same lines. The format is defined here and in ``src_train/ddptrain/metrics.py``
(which cannot import cloudddp because it runs in stock cloud images); a test keeps the two in step.

One meaning on every backend: metric lines and declared patterns are read from **global rank 0's** output
only (:func:`carries_metrics`), so a measurement every rank prints is one record, not one per rank; a job that
declares ``metrics.ranks: all`` reads every rank's, and each record then says its rank. Lines from outside the
program (a launcher, a toolkit, the runtime: no rank) never carry metrics.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

PREFIX = "CLOUDDDP_METRIC "
RANK_ZERO = "0"
EVERY_RANK = "all"
"""The two values of ``metrics.ranks``: global rank 0's lines (the default), or every rank's."""
RESERVED = ("step", "epoch", "time")
# Names the shared training script reports; SageMaker gets a MetricDefinition for each.
STANDARD_METRICS = (
    "train_loss",
    "train_acc",
    "test_loss",
    "test_acc",
    "lr",
    "images_per_sec",
    "epoch_time",
)
_NUMBER = r"(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"


@dataclass(frozen=True)
class MetricRecord:
    """One record of metrics a run printed: its step, epoch and time, the values by name, and who printed it."""

    step: int | None
    epoch: int | None
    time: float | None
    values: dict[str, float] = field(default_factory=dict)
    source: str = ""
    rank: int | None = None
    """The global rank that printed it, for a job that reads every rank's metrics (``metrics.ranks: all``)."""
    echoed: bool = field(default=False, compare=False)
    """Read from a line the attached view has just shown as it was printed (a declared ``metrics:`` regex matched
    it): a view that shows lines need not show the record again."""

    def to_dict(self) -> dict[str, Any]:
        rank = {} if self.rank is None else {"rank": self.rank}
        return {"step": self.step, "epoch": self.epoch, "time": self.time, **rank, **self.values}


def parse_metric_line(line: str, source: str = "") -> MetricRecord | None:
    """The record in one log line, or None. Tolerates prefixes added by launchers (``[rank0]:``)."""
    at = line.find(PREFIX)
    if at < 0:
        return None
    try:
        obj = json.loads(line[at + len(PREFIX) :])
    except ValueError:
        return None
    return record_from_dict(obj, source)


def _number(value: Any) -> float | None:
    """``value`` as a finite float, None for a bool, a non-number or an infinity; ValueError for an integer
    too large for a float (the record is refused rather than silently missing a value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"an integer of {int(value).bit_length():,} bits does not fit a float") from None
    return number if math.isfinite(number) else None


def record_from_dict(obj: Any, source: str = "") -> MetricRecord | None:
    """A record from a decoded metric object; keys other than step/epoch/time are values. ValueError for a
    number that no float can hold."""
    if not isinstance(obj, dict):
        return None
    values = {
        k: number
        for k, v in obj.items()
        if k not in RESERVED and k not in ("received", "rank") and (number := _number(v)) is not None
    }
    step, epoch, rank = obj.get("step"), obj.get("epoch"), obj.get("rank")
    return MetricRecord(
        step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        epoch=epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
        # A line that names no time (a declared regex) is dated by when it arrived, where that was kept.
        time=_number(obj.get("time")) if obj.get("time") is not None else _number(obj.get("received")),
        values=values,
        source=source,
        rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
    )


@dataclass(frozen=True)
class Pattern:
    """A metric declared by a regular expression over log lines, as SageMaker's MetricDefinitions are:
    the first group of ``regex`` is the value. Metrics named ``epoch`` or ``step`` set the record's."""

    name: str
    regex: str

    @functools.cached_property
    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.regex)

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "regex": self.regex}


def patterns_from(data: Iterable[dict[str, str]]) -> list[Pattern]:
    return [Pattern(d["name"], d["regex"]) for d in data]


def skipped_line_warning(line: str, error: BaseException) -> str:
    """The one warning for a line whose parsing failed (the line itself is not repeated: it may be huge)."""
    return (
        f"warning: a metric line was skipped ({len(line):,} characters): {type(error).__name__}: "
        f"{str(error).splitlines()[0][:200] if str(error) else 'no details'}"
    )


def parse_line(
    line: str, patterns: Sequence[Pattern] = (), source: str = "", *, warn: Callable[[str], None] | None = None
) -> MetricRecord | None:
    """The record in one log line: a ``CLOUDDDP_METRIC`` line, else the values of every declared pattern
    that matches it (None when nothing does, or only ``epoch`` and ``step`` do: a position is no measurement).
    Whatever goes wrong in parsing (a number too large for a float, nesting too deep for the decoder, ...) skips
    the line with one warning (to ``warn``, else to stderr): one bad line never stops the stream it is in."""
    try:
        return _parse_line(line, patterns, source)
    except Exception as e:  # noqa: BLE001 - any failure is a skipped record, never a dead log pump
        message = skipped_line_warning(line, e)
        if warn is None:
            print(message, file=sys.stderr, flush=True)
        else:
            warn(message)
        return None


TRAINER_LINE = re.compile(r"\s*(?:\[[^\]\s]*\]:?\s*)*(\{'.*\})\s*")
"""A printed dict, after the launchers' tags: how a Hugging Face Trainer prints each log record on rank 0."""
TRAINER_LONGEST = 4000
"""Longer printed dicts are not read: a Trainer's log record is a few hundred characters."""


def _numeric(value: Any) -> float | None:
    """A Trainer record's value as a number: a number, or a number as a string (transformers 5 prints floats
    formatted, ``'4e-05'``); None for anything else."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    return _number(value)


def trainer_record(line: str, source: str = "") -> MetricRecord | None:
    """The record of a Hugging Face Trainer's printed log record (``{'loss': 5.3, 'grad_norm': 1.2, 'epoch': 0.5}``,
    its ProgressCallback's or PrinterCallback's line), or None. Read as a Python literal, never run; a dict is one
    when it has a numeric ``epoch`` (the Trainer adds it to every record) and another numeric value. The Trainer's
    epoch counts fractions (0.5: half of the first): it is kept as the value ``epochs``, and as the record's epoch
    only when it is whole. Its step is not printed, so the record has none."""
    match = TRAINER_LINE.fullmatch(line) if len(line) <= TRAINER_LONGEST else None
    if match is None:
        return None
    try:
        obj = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    numbers = {str(k): n for k, v in obj.items() if isinstance(k, str) and (n := _numeric(v)) is not None}
    epochs = numbers.pop("epoch", None)
    if epochs is None or not numbers:
        return None
    return MetricRecord(
        step=None,
        epoch=int(epochs) if epochs.is_integer() else None,
        time=None,
        values={**{k: v for k, v in numbers.items() if k not in RESERVED}, "epochs": epochs},
        source=source,
    )


def _parse_line(line: str, patterns: Sequence[Pattern], source: str) -> MetricRecord | None:
    record = parse_metric_line(line, source) or trainer_record(line, source)
    if record is not None or not patterns:
        return record
    found: dict[str, float] = {}
    for pattern in patterns:
        match = pattern.compiled.search(line)
        if match:
            try:
                found[pattern.name] = float(match.group(1))
            except (IndexError, ValueError):
                continue
    step, epoch = found.pop("step", None), found.pop("epoch", None)
    if not found:  # a position alone (``Epoch 0 | snapshot saved``) is no measurement
        return None
    return MetricRecord(
        step=int(step) if step is not None else None,
        epoch=int(epoch) if epoch is not None else None,
        time=None,
        values={k: v for k, v in found.items() if math.isfinite(v)},
        source=source,
    )


def carries_metrics(rank: int | None, ranks: str = RANK_ZERO) -> bool:
    """Whether a line printed by global rank ``rank`` (None: from outside the program) is read for metrics."""
    return rank == 0 or (ranks == EVERY_RANK and rank is not None)


def record_of_line(
    text: str,
    patterns: Sequence[Pattern] = (),
    *,
    source: str = "",
    rank: int | None,
    ranks: str = RANK_ZERO,
    warn: Callable[[str], None] | None = None,
) -> MetricRecord | None:
    """The record a program line of ``rank`` carries under the ``metrics.ranks`` rule, or None. With
    ``ranks: all`` the record names its rank."""
    if not carries_metrics(rank, ranks):
        return None
    record = parse_line(text, patterns, source, warn=warn)
    if record is None or ranks != EVERY_RANK:
        return record
    return dataclasses.replace(record, rank=rank)


def metrics_from_lines(
    lines: Iterable[Any], patterns: Sequence[Pattern] = (), ranks: str = RANK_ZERO
) -> Iterator[MetricRecord]:
    """Metric records from log lines: ``LogLine`` objects (their ``rank`` decides, see :func:`carries_metrics`)
    or plain strings (one process's output, read as rank 0's)."""
    for item in lines:
        record = record_of_log_line(item, patterns, ranks)
        if record is not None:
            yield record


def record_of_log_line(item: Any, patterns: Sequence[Pattern] = (), ranks: str = RANK_ZERO) -> MetricRecord | None:
    """The record one log line carries (a ``LogLine``, or a plain string read as rank 0's); a record that names
    no time is dated by its log line's. One function for ``metrics`` and the attached view, so both show the
    same records."""
    if isinstance(item, str):
        text, source, rank = item, "", 0
    else:
        text, source, rank = item.text, item.source, item.rank
    record = record_of_line(text, patterns, source=source, rank=rank, ranks=ranks)
    at = getattr(item, "time", None)
    return replace(record, time=at) if record is not None and record.time is None and at is not None else record


def metric_regex(name: str) -> str:
    """A regex whose first group captures ``name``'s value in a metric line (SageMaker MetricDefinitions), compact
    JSON or ``json.dumps``'s default (``"loss": 0.5``, with a space: what a script of one's own prints)."""
    return f'{re.escape(PREFIX.strip())} .*"{re.escape(name)}":\\s*{_NUMBER}'
