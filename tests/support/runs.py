"""A run registry with many runs, written in one transaction (10,000 single adds would take many seconds)."""

from __future__ import annotations

from cloudddp.runs.database import RunDatabase

STATES = ("succeeded", "failed", "running", "cancelled")
BACKENDS = ("local", "sagemaker", "azureml")


def fill(registry: RunDatabase, count: int) -> list[str]:
    """``count`` runs of 40 job names, one second apart, spread over states and backends; their ids."""
    rows = [
        (f"job{i % 40:02d}-{i:06d}", BACKENDS[i % 3], f"job{i % 40:02d}", STATES[i % 4], 1e9 + i, 1e9 + i, "{}")
        for i in range(count)
    ]
    with registry._connect() as db:
        db.execute("BEGIN")
        db.executemany("INSERT INTO runs VALUES (?,?,?,?,?,?,?)", rows)
        db.execute("COMMIT")
    return [row[0] for row in rows]
