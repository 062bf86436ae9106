"""The options tables in docs/, made from the spec's models: a table is as current as the model it comes from.

A page asks for a table with two marker lines; what lies between them is this module's to write::

    <!-- options: sagemaker -->
    <!-- /options -->

NAME is a backend's section (``local``, ``sagemaker``, ``azureml``, ``slurm``: any registered backend), a section of
the job spec (``code``, ``inputs``, ``resources``, ``limits`` ...), or ``job`` for the spec's own top-level keys
(the backends' sections are each on its backend's page). A row
is one field: its path (a nested model's fields as ``slurm.container.image``, a map's entries as
``inputs.<name>.path``), its type with its bounds, its default (and the environment variables the backend reads
when the job leaves it out: ``env_fallbacks``) and its ``Field(description=...)``. A page without markers is left
alone.

    python -m tests.support.option_tables            # which tables are stale (exit 1 if any)
    python -m tests.support.option_tables --update   # write them (make docs)
"""

from __future__ import annotations

import re
import sys
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from cloudddp.backends import plugins
from cloudddp.spec import values
from cloudddp.spec.model import JobSpec

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "make docs (python -m tests.support.option_tables --update)"
MARKERS = re.compile(r"(<!-- options: (?P<name>[\w-]+) -->\n)(?P<table>.*?)(<!-- /options -->)", re.S)
JOB = "job"
"""The name of the table of the job spec's own top-level keys."""


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


def _cell(text: str) -> str:
    """One table cell: one line, rST's double backquotes as markdown's, pipes escaped."""
    return " ".join(text.split()).replace("``", "`").replace("|", "\\|")


def _code(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _bounds(metadata: list[Any]) -> str:
    """A field's numeric and length bounds in words: ``1–64``, ``≥ 0``, ``> 0``, ``at most 64 items``."""
    low = high = ""
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            low = f"{item.ge}"
        elif isinstance(item, annotated_types.Gt):
            low = f"> {item.gt}"
        elif isinstance(item, annotated_types.Le):
            high = f"{item.le}"
        elif isinstance(item, annotated_types.Lt):
            high = f"< {item.lt}"
        elif isinstance(item, annotated_types.MaxLen):
            return f"at most {item.max_length}"
    if low and high and not low.startswith(">") and not high.startswith("<"):
        return f"{low}–{high}"
    parts = [low if low.startswith(">") else f"≥ {low}" if low else "", high if high.startswith("<") else ""]
    parts[1] = parts[1] or (f"≤ {high}" if high else "")
    return ", ".join(p for p in parts if p)


_DURATIONS = {
    values.parse_duration: "duration (seconds, or `45m`, `2h`, `1d`)",
    values._duration_or_off: "duration, or `off`",
}
"""What a field validated by one of these takes, in words (its annotation says only ``int``)."""


def _duration(metadata: Iterable[Any]) -> str | None:
    for item in metadata:
        func = getattr(item, "func", None)
        if func in _DURATIONS:
            return _DURATIONS[func]
    return None


def _type_name(annotation: Any) -> str:
    """A person's name for a type: ``int``, ``list of str``, ``map of str``, ``"auto" | "cpu"``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _duration(args[1:]) or _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return " or ".join(_type_name(a) for a in kept)
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin in (list, dict):
        inner = _type_name(args[-1])
        return f"{'list' if origin is list else 'map'} of {'mappings' if inner == 'mapping' else inner}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _type(field: FieldInfo) -> str:
    name = _duration(field.metadata) or _type_name(field.annotation)
    bounds = _bounds(field.metadata)
    return f"{name}, {bounds}" if bounds else name


def _default(field: FieldInfo, fallbacks: tuple[str, ...]) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
        shown = "" if isinstance(value, BaseModel) else _code(value)
    elif field.default is PydanticUndefined:
        shown = "required"
    elif field.default is None:
        shown = "—"
    else:
        shown = _code(field.default)
    if fallbacks:
        shown += " (environment: " + ", ".join(f"`{v}`" for v in fallbacks) + ")"
    return shown.strip()


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds, and how its fields are reached: ``""`` (itself), ``.<name>`` (a map's entries),
    ``[]`` (a list's items)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _model_of(args[0])
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return _model_of(kept[0]) if len(kept) == 1 else (None, "")
    if origin is dict:
        model, _ = _model_of(args[1])
        return model, ".<name>"
    if origin is list:
        model, _ = _model_of(args[0])
        return model, "[]"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    return None, ""


def _summary(model: type[BaseModel]) -> str:
    return (model.__doc__ or "").strip().split("\n\n")[0]


def rows(model: type[BaseModel], prefix: str) -> Iterator[Row]:
    """One row per field of ``model`` (its path under ``prefix``), and the fields of the models it holds."""
    fallbacks: dict[str, tuple[str, ...]] = getattr(model, "env_fallbacks", {})
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        inner, reach = _model_of(field.annotation)
        description = field.description or (_summary(inner) if inner else "")
        yield Row(path, _type(field), _default(field, fallbacks.get(name, ())), description)
        if inner is not None:
            yield from rows(inner, path + reach)


def _sections() -> dict[str, tuple[type[BaseModel], str]]:
    """Every table's model and the path its rows start at, by the name its marker uses: the job spec's own keys
    and sections (whatever backends are installed), and each registered backend's section."""
    found: dict[str, tuple[type[BaseModel], str]] = {JOB: (JobSpec, "")}
    for name, field in JobSpec.model_fields.items():
        model, reach = _model_of(field.annotation)
        if model is not None:
            found[name] = (model, name + reach)
    for name in plugins.names():
        found[name] = (plugins.backend_class(name).options_model, name)
    return found


def table(name: str) -> str:
    """The markdown table ``<!-- options: NAME -->`` stands for; a KeyError naming the known names for another."""
    known = _sections()
    if name not in known:
        raise KeyError(f"no options section {name!r}; known: {', '.join(sorted(known))}")
    model, prefix = known[name]
    if name == JOB:
        found = [
            Row(r.path, "section" if r.type == "mapping" else r.type, r.default, r.description)
            for r in rows(model, prefix)
            if "." not in r.path and "[" not in r.path
        ]
    else:
        found = list(rows(model, prefix))
    lines = ["| option | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{r.path}` | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.description)} |" for r in found]
    return "\n" + "\n".join(lines) + "\n\n"


def updated(text: str) -> str:
    """``text`` with every marked table written anew."""
    return MARKERS.sub(lambda m: m.group(1) + table(m.group("name")) + m.group(4), text)


def pages(root: Path) -> list[Path]:
    """The pages under ``root``/docs that ask for a table."""
    return [p for p in sorted((root / "docs").rglob("*.md")) if MARKERS.search(p.read_text(encoding="utf-8"))]


def stale(root: Path) -> list[str]:
    """Each page whose tables differ from what the models say, one line each."""
    found = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        names = [m.group("name") for m in MARKERS.finditer(text) if table(m.group("name")) != m.group("table")]
        if names:
            found.append(f"{page.relative_to(root).as_posix()}: the options of {', '.join(names)} are stale")
    return found


def main(argv: list[str]) -> int:
    if argv == ["--update"]:
        for page in pages(ROOT):
            text = page.read_text(encoding="utf-8")
            if updated(text) != text:
                page.write_text(updated(text), encoding="utf-8")
                print(f"wrote {page.relative_to(ROOT).as_posix()}")
        return 0
    problems = stale(ROOT)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} page(s) stale: run {COMMAND}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
