"""Quantities as a person reads them in messages and plans."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """``1.5 MB``: decimal units, as the clouds' consoles and quotas count them."""
    for unit in ("bytes", "kB", "MB"):
        if n < 1000:
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
