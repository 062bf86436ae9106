"""What a job prints cannot drive the terminal of whoever reads its logs: colour passes, every other
control sequence is shown as text (OSC 52 clipboard writes, window titles, a cleared screen), after masking; and a
spec that is a FIFO, a device or too big is refused by name before it is read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.local.masking import byte_forms, mask
from cloudddp.backends.status import RunState
from cloudddp.cli.options import format_record
from cloudddp.observe.console import printable
from cloudddp.observe.metrics import MetricRecord
from cloudddp.spec.load import MAX_BYTES
from cloudddp.spec.secrets import redact, redaction_forms
from tests.support.cli import FIXTURES, cli

CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"
TITLE = "\x1b]0;pwned\x1b\\"
CLEAR = "\x1b[2J"
RED = "\x1b[31mred\x1b[0m"


def obeyed(text: str) -> list[str]:
    """The control sequences in ``text`` a terminal would act on, besides colour."""
    return [seq for seq in (CLIPBOARD, TITLE, CLEAR, "\x1b]", "\x07", "\x9b", "\r") if seq in text]


def test_printable_keeps_colour_and_shows_every_other_control_sequence_as_text() -> None:
    shown = printable(f"a {CLIPBOARD} {TITLE} {CLEAR} {RED} b\r\x9b2J\tc")
    assert obeyed(shown) == [] and RED in shown and "\tc" in shown
    assert "\\x1b]52;c;ZXZpbA==\\x07" in shown and "\\x1b[2J" in shown  # visible, so a reader sees it was there


def test_a_secret_split_by_a_colour_reset_is_still_masked() -> None:
    forms = redaction_forms(["s3cret-token-value"])
    assert redact("key s3cret-\x1b[0mtoken-\x1b[1;31mvalue!", forms) == "key ***!"
    assert redact("plain s3cret-token-value", forms) == "plain ***"
    assert redact(r"json s3cret-\u001b[0mtoken-value, repr s3cret-\x1b[0mtoken-value", forms) == "json ***, repr ***"


def test_the_run_files_mask_a_secret_split_by_colour_sequences_in_place(tmp_path: Path) -> None:
    raw = b"a s3cret-\x1b[0mtoken-value b s3cret-\\u001b[0mtoken-value c s3cret-token-value\n"
    path = tmp_path / "stdout.log"
    path.write_bytes(raw)
    fd = os.open(path, os.O_RDWR)
    try:
        mask(fd, 0, raw, byte_forms(redaction_forms(["s3cret-token-value"])))
    finally:
        os.close(fd)
    masked = path.read_bytes()
    assert len(masked) == len(raw) and b"token" not in masked and masked.startswith(b"a *") and b" c *" in masked


def test_metric_names_with_control_sequences_are_shown_not_obeyed() -> None:
    record = MetricRecord(step=1, epoch=1, time=None, values={f"{CLEAR}loss{TITLE}": 0.5})
    assert obeyed(format_record(record)) == [] and "loss" in format_record(record)


def test_a_fifo_a_device_and_an_oversized_file_are_refused_as_specs_by_name(tmp_path: Path) -> None:
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    for path, said in ((fifo, "is a FIFO"), (Path("/dev/zero"), "is a device")):
        result = cli("validate", str(path), timeout=30)
        assert result.returncode == 2 and f"{path}: {said}, not a job spec file" in result.stderr, result
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:
        f.truncate(300_000_000)  # sparse: 300 MB that cost no disk, refused from its size alone
    result = cli("validate", str(huge), timeout=30)
    assert result.returncode == 2 and f"too large for a job spec (limit {MAX_BYTES:,})" in result.stderr, result


@pytest.mark.slow
def test_logs_and_metrics_of_a_run_printing_escapes_obey_none_and_mask_the_split_secret(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / "tinyjob", folder)
    spec = folder / "job.yaml"
    spec.write_text(
        spec.read_text()
        + "env:\n"
        + '  TOKEN: {value: "s3cret-token-value", secret: true}\n'
        + '  EVIL: "\\e]52;c;ZXZpbA==\\a \\e]0;pwned\\e\\\\ \\e[2J \\e[31mred\\e[0m s3cret-\\e[0mtoken-value"\n'
        + '  METRIC: \'CLOUDDDP_METRIC {"epoch": 0, "\\u001b[2Jloss\\u001b]0;t\\u0007": 1.5}\'\n'
    )
    run = Job.load(spec, ["code.args=[--epochs, 1, --print-env, 'EVIL,METRIC']"]).submit("local")
    assert run.wait(timeout=120, poll=0.2).state is RunState.SUCCEEDED
    logs = cli("logs", run.run_id)
    assert logs.returncode == 0 and "red" in logs.stdout, logs
    assert obeyed(logs.stdout) == [] and RED in logs.stdout
    assert "token-value" not in logs.stdout and "***" in logs.stdout
    run_dir = Path(run.status().details["run_dir"])
    output = [*(run_dir / "ranks").rglob("*"), *(run_dir / "logs").rglob("*")]  # (the spec itself has EVIL raw)
    holding = [p for p in output if p.is_file() and b"token-value" in p.read_bytes()]
    assert holding == []  # nor in the consoles and the ranks' own files
    metrics = cli("metrics", run.run_id)
    assert metrics.returncode == 0 and "loss" in metrics.stdout, metrics
    assert obeyed(metrics.stdout) == []


def test_a_requirements_file_linked_out_of_the_code_folder_is_refused_unread(tmp_path: Path) -> None:
    outside = tmp_path / "shadow"
    outside.write_text("root-hash-9f8e7d:$6$salt$hash:19000\n")  # what a first line printed in an error would leak
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / "tinyjob", folder)
    (folder / "requirements.txt").symlink_to(outside)
    result = cli("render", str(folder / "job.yaml"), "--list-files")
    assert result.returncode == 2 and "outside code.dir: it is not read" in result.stderr, result
    assert "root-hash" not in result.stdout + result.stderr
