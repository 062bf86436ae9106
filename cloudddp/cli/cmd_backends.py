"""``backends``: the registered backends, what each can do and what it cannot."""

from __future__ import annotations

import click

from cloudddp.backends.commands import json_option
from cloudddp.backends.plugins import backend_classes
from cloudddp.observe.console import out, print_json


@click.command()
@json_option
def backends(json_: bool) -> None:
    """The registered backends, what each can do, and what it cannot (with the reason).

    \b
    Example:
      cloudddp backends --json
    """
    rows = [
        {
            "name": cls.name,
            "description": cls.description,
            "cloud": cls.cloud,
            "sigterm_grace_s": cls.sigterm_grace,
            **cls.capabilities.to_dict(),
            "enforces_max_cost": cls.spend_while_running,
            **({} if cls.spend_while_running else {"max_cost_not_enforced": cls.no_budget_reason}),
        }
        for cls in backend_classes()
    ]
    if json_:
        print_json(rows)
        return
    from rich.table import Table

    table = Table("backend", "what it runs on", "cannot", "caveats", show_lines=True)
    for row in rows:
        cannot = [f"{k}: {v}" for k, v in row["unsupported"].items()]
        if "max_cost_not_enforced" in row:
            cannot.append(f"enforce resources.max_cost: {row['max_cost_not_enforced']}")
        table.add_row(
            row["name"],
            row["description"],
            "\n".join(cannot),
            "\n".join(f"{k}: {v}" for k, v in row["caveats"].items()),
        )
    out().print(table)
