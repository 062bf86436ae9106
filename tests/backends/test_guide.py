"""The backend contract and its guide say the same thing: ``docs/writing-a-backend.md`` names every hook and class
attribute ``cloudddp/backends/base.py`` (and ``sized.py``) has, and no more; ``base.py``'s docstring names the same
hooks; no backend overrides a verb (the one naming rule); and the plugin fixture implements every hook the guide's
example shows (``tests/backends/test_plugins.py`` exercises each through cloudddp's commands)."""

from __future__ import annotations

import inspect
import re
import sys

import pytest

from cloudddp.backends import base
from cloudddp.backends.base import Backend
from cloudddp.backends.plugins import backend_class, names
from cloudddp.backends.sized import SizedBackend
from tests.support.cli import FIXTURES, ROOT

GUIDE = (ROOT / "docs" / "writing-a-backend.md").read_text()
CONTRACT = (Backend, SizedBackend)


def hooks_of(*classes: type) -> set[str]:
    """The methods a backend may override: single-underscore functions defined on ``classes``."""
    return {
        name
        for cls in classes
        for name, value in vars(cls).items()
        if name.startswith("_") and not name.startswith("__") and inspect.isfunction(value)
    }


def attributes_of(*classes: type) -> set[str]:
    """The class attributes ``classes`` declare (``ClassVar`` annotations)."""
    return {
        name
        for cls in classes
        for name, annotation in vars(cls).get("__annotations__", {}).items()
        if "ClassVar" in str(annotation)
    }


def verbs_of(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if not name.startswith("_") and inspect.isfunction(value)}


def guide_table(heading: str) -> set[str]:
    """The identifiers in the first column of the guide's table under ``## heading``."""
    section = GUIDE.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {re.match(r"\| `(\w+)", row).group(1) for row in rows}  # type: ignore[union-attr]


def missing_from_guide(*classes: type) -> tuple[set[str], set[str]]:
    """(hooks, attributes) of ``classes`` the guide's tables do not name."""
    return hooks_of(*classes) - guide_table("Hooks"), attributes_of(*classes) - guide_table("Class attributes")


def test_the_guide_names_every_hook_and_class_attribute_of_the_contract_and_no_other() -> None:
    assert missing_from_guide(*CONTRACT) == (set(), set())
    assert guide_table("Hooks") - hooks_of(*CONTRACT) == set()  # nothing stale
    assert guide_table("Class attributes") - attributes_of(*CONTRACT) == set()


def test_a_hook_or_attribute_the_guide_does_not_name_is_found() -> None:
    grown = type("Grown", (Backend,), {"_teleport": lambda self: None, "__annotations__": {"warp": "ClassVar[int]"}})
    assert missing_from_guide(Backend, grown) == ({"_teleport"}, {"warp"})


def test_base_docstring_lists_the_same_hooks() -> None:
    doc = base.__doc__ or ""
    hooks = doc.split("Hooks: required, then optional", 1)[1].split("\nVerbs\n", 1)[0]
    assert set(re.findall(r"^``(_\w+)\(", hooks, re.M)) == hooks_of(*CONTRACT)
    attributes = doc.split("Class attributes", 1)[1].split("Hooks: required", 1)[0]
    named = {name for line in attributes.splitlines() if line[:2] == "``" for name in re.findall(r"``(\w+)``", line)}
    assert named == attributes_of(*CONTRACT)


def backend_classes() -> list[type]:
    sys.path.insert(0, str(FIXTURES / "plugin"))
    try:
        from toy_backend import ToyBackend
    finally:
        sys.path.remove(str(FIXTURES / "plugin"))
    return [*(backend_class(name) for name in names()), ToyBackend]


@pytest.mark.parametrize("cls", backend_classes(), ids=lambda cls: cls.__name__)
def test_no_backend_overrides_a_verb(cls: type) -> None:
    verbs = verbs_of(Backend)
    own = [klass for klass in cls.__mro__ if issubclass(klass, Backend) and klass is not Backend]
    assert {(klass.__name__, verb) for klass in own for verb in verbs_of(klass) & verbs} == set()


def test_the_check_finds_a_backend_that_overrides_a_verb() -> None:
    rogue = type("Rogue", (Backend,), {"status": lambda self, run_id: None})
    assert verbs_of(rogue) & verbs_of(Backend) == {"status"}


def test_the_plugin_implements_every_hook_the_guides_example_shows() -> None:
    example = GUIDE.split("```python\n", 1)[1].split("```", 1)[0]
    shown = set(re.findall(r"def (_\w+)\(", example))
    toy = backend_classes()[-1]
    assert shown - set(vars(toy)) == set()
    optional = shown - {
        name for name in hooks_of(Backend) if getattr(getattr(Backend, name), "__isabstractmethod__", False)
    }
    assert optional, "the example shows optional hooks"


def test_the_guide_example_declares_only_attributes_the_contract_has() -> None:
    example = GUIDE.split("```python\n", 1)[1].split("```", 1)[0]
    body = example.split("class MyCloudBackend", 1)[1]
    declared = set(re.findall(r"^    (\w+) = ", body, re.M))
    assert declared and declared <= attributes_of(*CONTRACT)
