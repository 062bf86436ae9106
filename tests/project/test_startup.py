"""What a short command's speed rests on keeps every meaning: the garbage collector paused during start-up only,
pydantic told of its plugins from the cached entry-point scan (and a real plugin still runs; with none, pydantic's
scanner is not even imported), and libyaml's parser reading a spec (and its emitter writing Azure ML's documents)
exactly as PyYAML's own does, errors included."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cloudddp.backends import installed, plugins
from cloudddp.cli.app import _StartUpCollector, app
from cloudddp.errors import UserError
from cloudddp.spec import load
from tests.support.cli import ROOT, cli

JOBS = sorted((ROOT / "jobs").glob("*.yaml"))
NEEDS_LIBYAML = pytest.mark.skipif(
    load._FAST_LOADER is None or not hasattr(yaml, "CSafeDumper"),
    reason="PyYAML was built without libyaml, so there is no fast path to compare (PyPI's Linux wheels have it)",
)

PROBE = """
import gc, importlib.metadata as metadata, json, sys
scans = []
real = metadata.entry_points
def counted(**kwargs):
    scans.append(kwargs.get("group"))
    return real(**kwargs)
metadata.entry_points = counted  # before pydantic's plugin loader binds it
sys.argv = ["cloudddp", *sys.argv[1:]]
from cloudddp.cli.app import main
code = 0
try:
    main()
except SystemExit as e:
    code = e.code or 0
from pydantic.plugin import _loader
print(json.dumps({"code": code, "scans": scans, "plugins": sorted(_loader._plugins or {}),
                  "gc_enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}), file=sys.stderr)
"""


def probe(tmp_path: Path, *args: str, path: str = "") -> dict[str, object]:
    """Run the command through ``main()`` in a fresh interpreter; what it did, read back."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={"CLOUDDDP_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}{path}"},
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stderr.strip().splitlines()[-1])
    return report


def test_a_warm_cache_spares_pydantic_its_plugin_scan_and_the_collector_runs_again_after_start_up(tmp_path) -> None:
    job = str(ROOT / "jobs" / "cifar10-azureml.yaml")
    cold = probe(tmp_path, "render", job, "--backend", "azureml")
    assert cold["code"] == 0
    assert set(cold["scans"]) == {"cloudddp.backends", "cloudddp.commands", "pydantic"}  # the one scan, every group  # type: ignore[arg-type]
    warm = probe(tmp_path, "render", job, "--backend", "azureml")
    assert warm["code"] == 0 and warm["scans"] == [] and warm["plugins"] == []
    assert warm["gc_enabled"] is True  # paused for start-up only: a long command collects its garbage
    assert isinstance(warm["frozen"], int) and warm["frozen"] > 10_000  # what start-up built, out of its way


def test_an_installed_pydantic_plugin_still_sees_every_model(tmp_path) -> None:
    site = tmp_path / "site"
    info = site / "probe_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pydantic]\nprobe = probe_plugin:plugin\n")
    seen = tmp_path / "seen.txt"
    (site / "probe_plugin.py").write_text(
        textwrap.dedent(f"""
        class _Plugin:
            def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, settings):
                with open({str(seen)!r}, "a") as f:
                    f.write(schema_type_path.name + "\\n")
                return None, None, None

        plugin = _Plugin()
        """)
    )
    job = str(ROOT / "jobs" / "cifar10-azureml.yaml")
    for _ in range(2):  # the second run reads the cache the first wrote
        seen.unlink(missing_ok=True)
        report = probe(tmp_path, "validate", job, path=f":{site}")
        assert report["code"] == 0 and report["plugins"] == ["probe_plugin:plugin"]
        assert {"JobSpec", "Code", "Resources"} <= set(seen.read_text().split())


SCANNER_PROBE = """
import sys
sys.argv = ["cloudddp", *sys.argv[1:]]
from cloudddp.cli.app import main
try:
    main()
except SystemExit as e:
    assert not e.code, e.code
print("SCANNER=" + ",".join(m for m in ("importlib.metadata", "email") if m in sys.modules), file=sys.stderr)
"""


def test_with_no_pydantic_plugin_a_warm_cache_imports_no_entry_point_scanner(tmp_path) -> None:
    """Pydantic's plugin loader imports importlib.metadata (and its email parser) to scan; a warm cache that says no
    plugin is installed leaves both unimported: the stand-in answers for the loader."""
    job = str(ROOT / "jobs" / "cifar10-azureml.yaml")
    env = {"CLOUDDDP_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    seen = []
    for _ in range(2):  # the first run scans (and imports the scanner), the second reads the cache
        result = subprocess.run(
            [sys.executable, "-c", SCANNER_PROBE, "render", job, "-b", "azureml"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        seen.append(result.stderr.strip().splitlines()[-1])
    assert seen == ["SCANNER=importlib.metadata,email", "SCANNER="]


def test_the_stand_in_loads_pydantic_s_own_loader_for_a_name_it_lacks(monkeypatch) -> None:
    stand_in = installed._NoPydanticPlugins(installed.PYDANTIC_LOADER)
    monkeypatch.setitem(sys.modules, installed.PYDANTIC_LOADER, stand_in)
    assert stand_in.get_plugins() == ()
    assert stand_in.PYDANTIC_ENTRY_POINT_GROUP == "pydantic"  # not the stand-in's: pydantic's module, loaded now
    assert sys.modules[installed.PYDANTIC_LOADER] is not stand_in


def test_the_collector_is_left_alone_unless_main_paused_it() -> None:
    collector = _StartUpCollector()
    frozen = gc.get_freeze_count()
    collector.resume()
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    collector.pause()
    try:
        assert not gc.isenabled()
    finally:
        collector.resume()
    assert gc.isenabled()
    gc.unfreeze()


def test_the_command_run_in_process_leaves_the_collector_as_it_was() -> None:
    frozen = gc.get_freeze_count()
    result = CliRunner().invoke(app, ["render", str(ROOT / "jobs" / "cifar10-azureml.yaml"), "-b", "azureml"])
    assert result.exit_code == 0, result.output
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_render_through_the_console_entry_still_prints_the_documents() -> None:
    result = cli("render", str(ROOT / "jobs" / "cifar10-azureml.yaml"), "--backend", "azureml")
    assert result.returncode == 0, result.stderr
    assert "command:" in result.stdout and "tier: dedicated" in result.stdout


@NEEDS_LIBYAML
@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.name)
def test_libyaml_reads_every_shipped_job_as_pyyaml_does(job: Path, monkeypatch) -> None:
    text = job.read_text()
    fast = load.parse_yaml(text, "job.yaml")
    monkeypatch.setattr(load, "_FAST_LOADER", None)
    slow = load.parse_yaml(text, "job.yaml")
    assert fast[0] == slow[0] and fast[1].lines == slow[1].lines and fast[2] == slow[2]


MALFORMED = {
    "unclosed list": "name: x\ncode: [1, 2\n",
    "two colons": "name: x\ncode: a: b\n",
    "tab indent": "name: x\n\tcode: 1\n",
    "bad indent": "name: x\ninputs:\n  - a\n - b\n",
    "unknown alias": "name: *nope\n",
    "bad tag value": "name: !!int abc\n",
    "control character": "name: x\x07\n",
    "duplicate key": "name: x\nname: y\n",
    "not a mapping": "- a\n- b\n",
    "unterminated quote": "name: 'x\n",
    "deep nesting": "name: " + "[" * 60 + "]" * 60 + "\n",
    "key not a word": "name: x\n[1, 2]: y\n",
}


@NEEDS_LIBYAML
@pytest.mark.parametrize("text", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_yaml_is_worded_by_pyyaml_whichever_parser_read_it_first(text: str, monkeypatch) -> None:
    def outcome() -> object:
        try:
            data, positions, problems = load.parse_yaml(text, "job.yaml")
        except UserError as e:
            return ("error", str(e))
        return ("read", data, positions.lines, problems)

    fast = outcome()
    monkeypatch.setattr(load, "_FAST_LOADER", None)
    assert fast == outcome()


AZURE_VARIANTS = {
    "as shipped": [],
    "mpi launcher, 2 nodes": ["distribution.launcher=mpi", "resources.nodes=2"],
    "arguments with quotes and unicode": ["code.args=[--note, 'héllo: wörld', '--x=\"1 2\"', '#no']"],
}


@NEEDS_LIBYAML
@pytest.mark.parametrize("overrides", AZURE_VARIANTS.values(), ids=AZURE_VARIANTS.keys())
def test_libyaml_writes_the_azure_ml_documents_byte_for_byte_as_pyyaml_does(overrides: list[str], monkeypatch) -> None:
    spec = plugins.load_spec(ROOT / "jobs" / "cifar10-azureml.yaml", overrides)
    fast = plugins.backend_class("azureml")(token="t1").render(spec).documents
    monkeypatch.delattr(yaml, "CSafeDumper")
    assert fast == plugins.backend_class("azureml")(token="t1").render(spec).documents
