"""The spec's own kinds of value: durations (``90``, ``45m``, ``2h``, ``1d``), a duration or ``off``, and ``auto``,
``on`` or ``off``, each read the way a person writes it in YAML and in ``-o`` (where ``on`` and ``off`` unquoted are
true and false)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

_DURATION = re.compile(r"^\s*(?:(\d+)\s*d)?\s*(?:(\d+)\s*h)?\s*(?:(\d+)\s*m)?\s*(?:(\d+)\s*s?)?\s*\Z")
MAX_SECONDS = 28 * 24 * 3600  # SageMaker's and Azure ML's longest job runtime


def parse_duration(value: Any) -> int:
    """Seconds from an int or a string such as ``90``, ``"45m"``, ``"2h"``, ``"1h30m"``, ``"1d"``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 3600, '45m' or '2h'")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and value.strip() and (m := _DURATION.match(value)):
        d, h, mi, s = (int(g) if g else 0 for g in m.groups())
        seconds = ((d * 24 + h) * 60 + mi) * 60 + s
    else:
        raise ValueError("expected a duration such as 3600, '45m' or '2h'")
    if seconds <= 0 or seconds > MAX_SECONDS:
        raise ValueError(f"duration must be between 1 s and 28 days, got {seconds} s")
    return seconds


Duration = Annotated[int, BeforeValidator(parse_duration)]


def written(seconds: float) -> str:
    """A duration the way a spec writes it: ``3600`` -> ``1h``, ``5400`` -> ``1h30m``, ``90`` -> ``1m30s``."""
    left, parts = int(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0s"


def _duration_or_off(value: Any) -> Any:
    """A duration, or ``off``: written unquoted in YAML (and in ``-o``), ``off`` is read as false, which means it
    too."""
    if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
        return "off"
    try:
        return parse_duration(value)
    except ValueError as e:
        raise ValueError(f"{e}, or 'off'") from None


DurationOrOff = Annotated[int | Literal["off"], BeforeValidator(_duration_or_off)]


def _auto_on_off(value: Any) -> Any:
    """``on`` and ``off`` written unquoted in YAML (and in ``-o``) are read as true and false, which mean them."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


AutoOnOff = Annotated[Literal["auto", "on", "off"], BeforeValidator(_auto_on_off)]
