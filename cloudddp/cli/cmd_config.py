"""``config``: where the user configuration is, and what it sets (docs/configuration.md).

A group of its own rather than more options of ``check``: ``check`` asks the clouds (up to a minute a backend),
while ``config path`` and ``config show`` read one local file and answer at once, for a script as for a person.
"""

from __future__ import annotations

import click
import yaml

from cloudddp.backends.commands import json_option
from cloudddp.backends.plugins import SECTIONS, user_config
from cloudddp.observe.console import note, print_json
from cloudddp.spec.userconfig import config_path, shown


@click.group()
def config() -> None:
    """The user configuration: each backend's settings kept once, outside every job (a job's own values win).

    \b
    Examples:
      cloudddp config path
      cloudddp config show
    """


@config.command()
def path() -> None:
    """Print where cloudddp reads the user configuration: $CLOUDDDP_CONFIG, else $CLOUDDDP_HOME/config.yaml, else
    $XDG_CONFIG_HOME/cloudddp/config.yaml (~/.config/cloudddp/config.yaml).

    \b
    Example:
      $EDITOR "$(cloudddp config path)"
    """
    where = config_path()
    click.echo(str(where))
    if not where.exists():
        note("no file there yet: create it (docs/configuration.md has an example)")


@config.command()
@json_option
def show(json_: bool) -> None:
    """Check the user configuration and print what it sets: each backend's settings, and the backends -b auto
    tries when a job names none.

    \b
    Example:
      cloudddp config show --json
    """
    found = user_config()
    if found:
        found.check(SECTIONS)  # every section, not only those a job uses
    document = {
        "path": str(config_path()),
        "found": found is not None,
        "settings": found.settings if found else {},
        "backends": found.backends if found else [],
    }
    if json_:
        print_json(document)
        return
    if found is None:
        click.echo(f"no user configuration: cloudddp would read {shown(config_path())}")
        return
    click.echo(f"# {shown(found.path)}: valid")
    if found.settings:
        click.echo(yaml.safe_dump(found.settings, sort_keys=False, default_flow_style=False).rstrip())
    click.echo(f"# -b auto tries: {', '.join(found.backends) or 'no backend (none configured)'}")
