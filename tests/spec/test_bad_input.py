"""Bad input never crashes cloudddp: exit code 2, a one-screen message, no traceback.

A corpus of broken specs goes through the real CLI; a property-based test throws ≥ 10,000 mutated
specs at the loader and accepts only two outcomes: a valid JobSpec or a UserError. Mutated specs also go
through render on every registered backend (a plan or a UserError) and through the CLI (exit 0 or 2, never a
traceback).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cloudddp.backends.plugins import backend_class, names, spec_from_bytes
from cloudddp.errors import UserError
from cloudddp.spec.model import JobSpec
from tests.support.cli import cli
from tests.support.waiting import LOADED

VALID = b"""\
name: fuzz
code: {dir: ., entry: train.py, args: [--epochs, "3"]}
inputs: {data: {path: ./data, arg: --data-dir}}
resources: {nodes: 2, gpus_per_node: 8, accelerator: A100, spot: true}
distribution: {backend: nccl, launcher: torchrun, collective_timeout: 10m}
env: {A: "1", TOKEN: {from_env: HOME, secret: true}}
checkpoint: {every_epochs: 2, resume: auto}
limits: {max_runtime: 2h, max_restarts: 3}
sagemaker: {region: us-east-1, instance_type: ml.p4d.24xlarge}
azureml: {compute: gpu-cluster, vm_size: Standard_ND96asr_v4}
"""

CORPUS: dict[str, bytes] = {
    "wrong type": b"name: x\nresources: {nodes: [1, 2]}\n",
    "unknown key": b"name: x\nresorces: {nodes: 2}\n",
    "unknown nested key": b"name: x\ndistribution: {backend: nccl, procs: 8}\n",
    "negative count": b"name: x\nresources: {nodes: -4}\n",
    "zero processes": b"name: x\nlocal: {processes_per_node: 0}\n",
    "impossible: smddp on CPU": b"name: x\ndistribution: {backend: smddp}\n",
    "impossible: nccl on CPU": b"name: x\ndistribution: {backend: nccl}\n",
    "impossible: 17 GPUs a node": b"name: x\nresources: {gpus_per_node: 17}\n",
    "impossible: command and args": b"name: x\ncode: {command: [python, t.py], args: [--a]}\n",
    "huge integer": b"name: x\nresources: {nodes: " + b"9" * 400 + b"}\n",
    "huge float": b"name: x\nresources: {min_gpu_memory_gb: 1e400}\n",
    "huge duration": b"name: x\nlimits: {max_runtime: 99999999999999999999d}\n",
    "very long string": b"name: " + b"a" * 100_000 + b"\n",
    "UTF-16": "name: x\n".encode("utf-16"),
    "latin-1": "name: caf\xe9\n".encode("latin-1"),
    "empty": b"",
    "only a comment": b"# nothing\n",
    "binary": bytes(range(256)) * 4,
    "YAML bomb": b"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nname: [*e,*e,*e,*e,*e,*e,*e]\n",
    "recursive alias": b"a: &a [*a]\nname: x\n",
    "deep nesting": b"name: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "python tag": b"name: !!python/object/apply:os.system ['echo hi']\n",
    "empty tagged int": b"name: x\nlocal: {processes_per_node: !!int }\n",  # PyYAML raises IndexError here
    "bad tagged float": b"name: x\nresources: {disk_gb: !!float abc}\n",
    "merge key abuse": b"base: &b {nodes: 1}\nresources: {<<: [*b, *b, *b], nodes: x}\nname: x\n",
    "tabs": b"name: x\nresources:\n\tnodes: 2\n",
    "a list at the top": b"- name: x\n",
    "a scalar at the top": b"just words\n",
    "two documents": b"name: x\n---\nname: y\n",
    "non-string key": b"name: x\n? [a, b]\n: 1\n",
    "null name": b"name:\n",
    "bool as env value": b"name: x\nenv: {A: true}\n",
    "bad env name": b"name: x\nenv: {'A-B': '1'}\n",
    "secret without source": b"name: x\nenv: {A: {secret: true}}\n",
}


@pytest.mark.parametrize("case", list(CORPUS))
def test_broken_spec_gets_exit_2_and_a_one_screen_message(tmp_path: Path, case: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(CORPUS[case])
    result = cli("validate", str(path), timeout=60)
    assert result.returncode == 2, (case, result.stdout, result.stderr)
    message = result.stderr
    assert "Traceback" not in message and "Traceback" not in result.stdout
    assert message.startswith("error:"), message
    assert len(message.splitlines()) <= 24 and len(message) <= 4000, message


def mutate(data: st.DataObject) -> bytes:
    raw = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "dup-line", "swap-token", "splice"]))
        at = data.draw(st.integers(0, max(0, len(raw) - 1)))
        if op == "flip" and raw:
            raw[at] = data.draw(st.integers(0, 255))
        elif op == "insert":
            raw[at:at] = data.draw(
                st.sampled_from(
                    [
                        b":",
                        b"-",
                        b"[",
                        b"{",
                        b"&a ",
                        b"*a",
                        b"\n  ",
                        b"'",
                        b'"',
                        b"#",
                        b"!!int ",
                        b"~",
                        b"<<: ",
                        b"0x",
                        b"1e9",
                        b"\t",
                        b"\xff",
                        b"\x00",
                    ]
                )
            )
        elif op == "delete":
            del raw[at : at + data.draw(st.integers(1, 20))]
        elif op == "dup-line":
            lines = raw.split(b"\n")
            i = data.draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            raw = bytearray(b"\n".join(lines))
        elif op == "swap-token":
            tokens = [
                b"nodes",
                b"gpus_per_node",
                b"true",
                b"-1",
                b"999999999999",
                b"null",
                b"[]",
                b"{}",
                b"smddp",
                b"2h",
                b"name",
                b"code",
                b"resources",
            ]
            old, new = data.draw(st.sampled_from(tokens)), data.draw(st.sampled_from(tokens))
            raw = bytearray(bytes(raw).replace(old, new, 1))
        elif op == "splice":
            raw[at:at] = data.draw(st.binary(max_size=12))
    return bytes(raw)


@pytest.mark.timeout(LOADED * 2)  # 74 s alone; over 300 s beside another copy of the suite
@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.data())
def test_ten_thousand_mutated_specs_raise_nothing_but_user_errors(data: st.DataObject) -> None:
    raw = mutate(data)
    try:
        spec = spec_from_bytes(raw, source="mutated.yaml")
    except UserError as e:
        assert str(e).strip()
        assert len(str(e).splitlines()) <= 24
    else:
        assert isinstance(spec, JobSpec)


@pytest.fixture(scope="module")
def fuzz_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A code folder the mutated specs can render from: its train.py and its data input."""
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "train.py").write_text("print('hello')\n")
    (folder / "data").mkdir()
    (folder / "data" / "part-0.bin").write_bytes(b"\0" * 64)
    return folder


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_mutated_specs_that_load_render_on_every_backend_or_raise_a_user_error(
    data: st.DataObject, fuzz_folder: Path
) -> None:
    raw = mutate(data)
    try:
        spec = spec_from_bytes(raw, source="mutated.yaml", base_dir=fuzz_folder)
    except UserError:
        return
    for name in names():
        try:
            plan = backend_class(name)().render(spec)
        except UserError as e:
            assert str(e).strip() and len(str(e).splitlines()) <= 40, (name, str(e))
        else:
            assert plan.backend == name and plan.text()


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_mutated_specs_through_the_cli_exit_0_or_2_never_with_a_traceback(
    data: st.DataObject, fuzz_folder: Path
) -> None:
    path = fuzz_folder / "mutated.yaml"
    path.write_bytes(mutate(data))
    backend = data.draw(st.sampled_from(names()))
    result = cli("render", str(path), "--backend", backend, timeout=60)
    assert result.returncode in (0, 2), (backend, result.stderr[-2000:])
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    if result.returncode == 2:
        assert result.stderr.startswith("error:"), result.stderr[:500]
