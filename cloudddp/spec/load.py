"""Loading a job spec from YAML with errors a person can act on.

Every problem names the field path and the line in the file, says what is expected, and suggests the
nearest valid key for a typo. The loader guards against inputs that are not job specs at all: binary
or non-UTF-8 files, huge files, and YAML whose aliases expand into millions of nodes.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import stat
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ValidationError

from cloudddp.errors import SpecError, UserError
from cloudddp.spec.model import REVEAL_SECRETS, Configured, JobSpec, Sections, spec_model
from cloudddp.spec.size import MAX_BYTES

MAX_NODES = 20_000  # nodes after alias expansion; a real spec has a few hundred
MAX_DEPTH = 50

Loc = tuple[str | int, ...]


class Positions:
    """Line numbers of every key and item, by data path; where an override or the user configuration set one."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: dict[Loc, int] = {}
        self.overrides: dict[Loc, str] = {}
        self.sources: dict[Loc, str] = {}
        """``file:line`` of the values another file gave (the user configuration, :mod:`.userconfig`)."""

    def where(self, loc: Loc) -> str:
        if loc and loc not in self.lines:
            made = [text for path, text in self.overrides.items() if path[: len(loc)] == loc]
            if made:  # a key only an override wrote (a typo in -o): the override, not the top of the file
                return f"override {made[0]}"
        for n in range(len(loc), -1, -1):
            prefix = loc[:n]
            if prefix in self.overrides:
                return f"override {self.overrides[prefix]}"
            if prefix in self.sources:
                return self.sources[prefix]
            if prefix in self.lines:
                return f"{self.source}:{self.lines[prefix]}"
        return self.source


class Configuration(Protocol):
    """Settings from outside the job that fill it at load (:class:`cloudddp.spec.userconfig.UserConfig`)."""

    def merge_into(self, job: dict[str, Any], positions: Positions, sections: Sections) -> Configured:
        """Fill ``job``'s data (after the overrides, before validation) with what it leaves out."""
        ...


class _Builder:
    """Turns a composed YAML node tree into plain data, recording positions and enforcing limits."""

    def __init__(self, loader: yaml.SafeLoader, positions: Positions) -> None:
        self.loader = loader
        self.positions = positions
        self.count = 0
        self.problems: list[str] = []

    def build(self, node: yaml.Node, loc: Loc = (), depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise UserError(
                f"{self.positions.source}: the YAML expands to more than {MAX_NODES:,} values "
                "(anchors and aliases nested too deep?); a job spec is a few hundred at most"
            )
        if depth > MAX_DEPTH:
            raise UserError(f"{self.positions.source}:{node.start_mark.line + 1}: nested more than {MAX_DEPTH} deep")
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self._construct(key_node)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    line = key_node.start_mark.line + 1
                    raise UserError(f"{self.positions.source}:{line}: a key must be a plain word, not {key!r}")
                key = str(key) if not isinstance(key, str) else key
                child = loc + (key,)
                line = key_node.start_mark.line + 1
                if key in out:
                    self.problems.append(
                        f"{self.positions.source}:{line}: {_dotted(child)}: key given twice "
                        f"(first on line {self.positions.lines[child]}); remove one"
                    )
                self.positions.lines.setdefault(child, line)
                out[key] = self.build(value_node, child, depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.positions.lines.setdefault(loc + (i,), item.start_mark.line + 1)
                items.append(self.build(item, loc + (i,), depth + 1))
            return items
        return self._construct(node)

    def _construct(self, node: yaml.Node) -> Any:
        """A scalar's value; a tag that cannot build it (``!!int name``) is the user's error, with its line."""
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError:
            raise
        except Exception as e:  # noqa: BLE001 - PyYAML's tag constructors raise ValueError, IndexError, ... on bad text
            raise UserError(
                f"{self.positions.source}:{node.start_mark.line + 1}: "
                f"cannot read {node.tag} value {str(node.value)[:40]!r}: {e}"
            ) from None


def _dotted(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def decode(raw: bytes, source: str) -> str:
    if len(raw) > MAX_BYTES:
        raise UserError(f"{source}: {len(raw):,} bytes is too large for a job spec (limit {MAX_BYTES:,})")
    if not raw.strip():
        raise UserError(f"{source}: the file is empty", hint="a job spec needs at least `name:`; try `cloudddp init`")
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or raw[:4] in (b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00"):
        raise UserError(f"{source}: the file is UTF-16 or UTF-32 encoded", hint="save the file as UTF-8")
    if b"\x00" in raw[:8192]:
        raise UserError(f"{source}: this looks like a binary file, not a YAML job spec")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise UserError(
            f"{source}:{line}: the file is not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})",
            hint="save the file as UTF-8",
        ) from None


_FAST_LOADER: type[yaml.SafeLoader] | None = getattr(yaml, "CSafeLoader", None)
"""libyaml's parser, where PyYAML was built with it: ~15× faster than PyYAML's own on a job spec."""


def parse_yaml(text: str, source: str) -> tuple[Any, Positions, list[str]]:
    """Parse one YAML document into plain data plus the line of every key.

    A text PyYAML's reader accepts is read with libyaml's parser first; any YAML error there is left to PyYAML's
    own loader, which reads it again, so that what a person sees about malformed YAML is always PyYAML's words."""
    if _FAST_LOADER is not None and not yaml.reader.Reader.NON_PRINTABLE.search(text):
        with contextlib.suppress(yaml.YAMLError, RecursionError):
            return _read(_FAST_LOADER(text), source)
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as e:  # the reader refuses control characters at once
        raise UserError(f"{source}: not a YAML text: {e}") from None
    try:
        return _read(loader, source)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        what = " ".join(x for x in (e.context, e.problem) if x)
        raise UserError(f"{where}: malformed YAML: {what}") from None
    except yaml.YAMLError as e:
        raise UserError(f"{source}: malformed YAML: {e}") from None
    except RecursionError:
        raise UserError(f"{source}: the YAML is nested too deep") from None


def _read(loader: yaml.SafeLoader, source: str) -> tuple[Any, Positions, list[str]]:
    """The document ``loader`` holds, as data with positions; YAML errors are the caller's to word."""
    positions = Positions(source)
    positions.lines[()] = 1
    try:
        node = loader.get_single_node()
        if node is None:
            raise UserError(f"{source}: the file holds no YAML document", hint="a job spec needs at least `name:`")
        builder = _Builder(loader, positions)
        data = builder.build(node)
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise UserError(
            f"{source}:1: a job spec is a mapping of keys (name:, code:, resources: ...), got {type(data).__name__}"
        )
    return data, positions, builder.problems


def apply_override(data: dict[str, Any], assignment: str, positions: Positions | None = None) -> None:
    """Apply one ``key.path=value`` override; the value is read as YAML (``2``, ``true``, ``[a, b]``)."""
    key, sep, text = assignment.partition("=")
    if not sep or not key.strip():
        raise UserError(f"override {assignment!r}: expected key.path=value, e.g. -o resources.nodes=2")
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in key.strip().split(".")]
    if any(p == "" for p in parts):
        raise UserError(f"override {assignment!r}: empty part in the key path {key!r}")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as e:
        if text.lstrip()[:1] in ("[", "{", '"', "'"):  # meant as a list, a mapping or a quoted string
            problem = getattr(e, "problem", None) or "not valid YAML"
            raise UserError(
                f"override -o {assignment}: the value {text.strip()!r} is not valid YAML ({problem})",
                hint="close what you opened and quote the whole option: -o 'code.args=[--epochs, 3]'",
            ) from None
        value = text  # a plain word with YAML punctuation in it, e.g. a URL: taken as the string it is
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(node, dict):
            if not isinstance(node.get(part), (dict, list)):
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            raise UserError(f"override {assignment!r}: {_dotted(parts[: i + 1])} is not a mapping or list")
    last = parts[-1]
    if isinstance(node, list):
        if not isinstance(last, int) or last > len(node):
            raise UserError(f"override {assignment!r}: list index {last} out of range")
        if last == len(node):
            node.append(value)
        else:
            node[last] = value
    else:
        node[last] = value
    if positions is not None:
        positions.overrides[tuple(parts)] = f"-o {assignment}"


# -- turning pydantic errors into lines a person can act on ----------------------------------------


def _model_in(annotation: Any) -> Any:
    """The pydantic model or mapping value type inside an annotation (Optional, Annotated, dict)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if origin in (dict, Mapping):
        return ("mapping", typing.get_args(annotation)[1])
    return None


def _allowed_keys(loc: Loc, sections: Sections) -> list[str]:
    """Valid keys of the section at ``loc`` (a data path), or [] when it is not a model."""
    if not loc:
        return [*JobSpec.model_fields, *sections.names()]
    current: Any = spec_model(sections, [str(loc[0])])
    expect_key = False
    for part in loc:
        if expect_key:
            current = _model_in(current)
            expect_key = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return []
        found = _model_in(current.model_fields[part].annotation)
        if isinstance(found, tuple):
            current, expect_key = found[1], True
        else:
            current = found
    if isinstance(current, type) and issubclass(current, BaseModel) and not expect_key:
        return list(current.model_fields)
    return []


def _data_loc(loc: Sequence[str | int], data: Any, *, key_may_be_absent: bool) -> Loc:
    """Drop pydantic's union-branch tags from ``loc`` so it matches the document's keys."""
    out: list[str | int] = []
    node = data
    for part in loc:
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if (isinstance(node, dict) and part in node) or in_list:
            out.append(part)
            node = node[part]
        elif key_may_be_absent and isinstance(node, dict) and len(out) == len(loc) - 1:
            out.append(part)  # a missing or unknown key at the end
    return tuple(out)


def describe(err: Any, data: Any, positions: Positions, sections: Sections) -> str:
    kind = err["type"]
    loc = _data_loc(err["loc"], data, key_may_be_absent=kind in ("missing", "extra_forbidden"))
    where = positions.where(loc)
    field = _dotted(loc)
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], sections)
        guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        tip = f"; did you mean '{guess[0]}'?" if guess else ""
        return f"{where}: {field}: unknown key{tip} (valid here: {', '.join(allowed)})"
    if kind == "missing":
        return f"{where}: {field}: required field is missing"
    msg = err["msg"].removeprefix("Value error, ")
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r:.60})"
    return f"{where}: {field}: {msg}{shown}"


def spec_from_data(
    data: dict[str, Any],
    *,
    base_dir: Path,
    positions: Positions,
    sections: Sections,
    overrides: Sequence[str] = (),
    problems: Sequence[str] = (),
    config: Configuration | None = None,
) -> JobSpec:
    """The spec ``data`` holds, changed by ``overrides``, then filled from the user configuration ``config``: -o
    wins over the job, the job over the configuration (:mod:`cloudddp.spec.userconfig`)."""
    for assignment in overrides:
        apply_override(data, assignment, positions)
    deferred = config.merge_into(data, positions, sections) if config else None
    issues = list(problems)
    spec = None
    try:
        spec = spec_model(sections, data).model_validate(data)
    except ValidationError as e:
        seen: set[str] = set()
        for err in e.errors():
            line = describe(err, data, positions, sections)
            if line not in seen:
                seen.add(line)
                issues.append(line)
    except RecursionError:
        issues.append(f"{positions.source}: the data is nested too deep")
    if issues or spec is None:
        raise SpecError(positions.source, issues)
    spec._base_dir = base_dir
    spec._user_config = deferred
    return spec


def spec_from_bytes(
    raw: bytes,
    *,
    sections: Sections,
    source: str = "<text>",
    base_dir: str | Path = ".",
    overrides: Sequence[str] = (),
    config: Configuration | None = None,
) -> JobSpec:
    """Check and return the job spec in ``raw`` (YAML bytes), as if read from a file named ``source``."""
    data, positions, problems = parse_yaml(decode(raw, source), source)
    return spec_from_data(
        data,
        base_dir=Path(base_dir).resolve(),
        positions=positions,
        sections=sections,
        overrides=overrides,
        problems=problems,
        config=config,
    )


def load_spec(
    path: str | Path, overrides: Sequence[str] = (), *, sections: Sections, config: Configuration | None = None
) -> JobSpec:
    """Read, check and return the job spec at ``path`` with ``key.path=value`` overrides applied."""
    path = Path(path)
    source = str(path)
    try:
        raw = read_spec_file(path, source)
    except FileNotFoundError:
        raise UserError(
            f"{source}: no such file", hint="give the path of a job spec, e.g. jobs/digits-local.yaml"
        ) from None
    except IsADirectoryError:
        raise UserError(f"{source}: is a directory, not a job spec file") from None
    except OSError as e:
        raise UserError(f"{source}: cannot read: {e.strerror}") from None
    base_dir = path.resolve().parent
    return spec_from_bytes(raw, sections=sections, source=source, base_dir=base_dir, overrides=overrides, config=config)


def read_spec_file(path: Path, source: str) -> bytes:
    """The file's bytes, read only when it is a regular file no bigger than a spec may be: a FIFO would hang the
    read, a device (``/dev/zero``) never end it, a huge file fill memory before it is refused."""
    st = path.stat()
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "not a regular file"
        )
        raise UserError(f"{source}: is {kind}, not a job spec file", hint="give the path of a YAML file")
    if st.st_size > MAX_BYTES:
        raise UserError(f"{source}: {st.st_size:,} bytes is too large for a job spec (limit {MAX_BYTES:,})")
    with open(path, "rb") as f:
        return f.read(MAX_BYTES + 1)  # the file may have grown since: decode refuses it then


def spec_from_dict(
    data: Mapping[str, Any],
    *,
    sections: Sections,
    base_dir: str | Path = ".",
    overrides: Sequence[str] = (),
    source: str = "<dict>",
    config: Configuration | None = None,
) -> JobSpec:
    """Build a job spec from a mapping (the Python API), with the same checks and messages as a file."""
    return spec_from_data(
        copy.deepcopy(dict(data)),
        base_dir=Path(base_dir).resolve(),
        positions=Positions(source),
        sections=sections,
        overrides=overrides,
        config=config,
    )


def where_set(path: str | Path, loc: Loc, overrides: Sequence[str] = ()) -> str:
    """Where field ``loc`` of the spec file at ``path`` is set: ``job.yaml:3``, ``override code.entry=x``, or the
    file's name when the field is left to its default (for messages about a spec that loaded)."""
    source = str(path)
    data, positions, _ = parse_yaml(decode(Path(path).read_bytes(), source), source)
    for assignment in overrides:
        apply_override(data, assignment, positions)
    return positions.where(loc)


def spec_to_data(spec: JobSpec, *, reveal_secrets: bool = False) -> dict[str, Any]:
    """The spec as plain data with defaults left out (what a person would write); literal secret values
    hidden unless ``reveal_secrets`` (to rebuild the spec in memory, never to show or store)."""
    return spec.model_dump(mode="json", exclude_defaults=True, context={REVEAL_SECRETS: reveal_secrets})
