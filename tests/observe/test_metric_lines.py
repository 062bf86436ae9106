"""Metric lines from any backend's logs: a line no parser can hold is one warning, never the end of the stream."""

from __future__ import annotations

import pytest

from cloudddp.observe.metrics import metrics_from_lines, parse_line
from tests.support.cli import FIXTURES, cli


def test_a_bad_line_is_skipped_with_one_warning_and_the_lines_after_it_still_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = [
        'CLOUDDDP_METRIC {"epoch": 1, "loss": 0.5}',
        'CLOUDDDP_METRIC {"epoch": 2, "loss": ' + "9" * 400 + "}",  # OverflowError in float()
        "CLOUDDDP_METRIC " + "[" * 50_000 + "]" * 50_000,  # RecursionError in the decoder
        'CLOUDDDP_METRIC {"epoch": 3, "loss": 0.25, "time": ' + "1" * 400 + "}",
        'CLOUDDDP_METRIC {"epoch": 4, "loss": 0.125}',
    ]
    assert [(r.epoch, r.values) for r in metrics_from_lines(lines)] == [(1, {"loss": 0.5}), (4, {"loss": 0.125})]
    warned = capsys.readouterr().err.splitlines()
    assert len(warned) == 3 and all(w.startswith("warning: a metric line was skipped") for w in warned), warned
    assert "9" * 50 not in "".join(warned)  # the line itself is not repeated
    seen: list[str] = []
    assert parse_line(lines[1], warn=seen.append) is None and len(seen) == 1


def trainer_printed(logs: dict[str, float], capsys: pytest.CaptureFixture[str]) -> str:
    """The line a Hugging Face Trainer prints for ``logs`` on rank 0 (its own PrinterCallback, as it is)."""
    from transformers.trainer_callback import PrinterCallback, TrainerControl, TrainerState

    state = TrainerState()
    state.is_local_process_zero = state.is_world_process_zero = True
    capsys.readouterr()
    PrinterCallback().on_log(None, state, TrainerControl(), logs=dict(logs))
    (line,) = capsys.readouterr().out.splitlines()
    return line


def test_a_hugging_face_trainer_log_record_is_read_as_a_record(capsys: pytest.CaptureFixture[str]) -> None:
    line = trainer_printed({"loss": 5.3125, "grad_norm": 1.5, "learning_rate": 4e-05, "epoch": 0.5}, capsys)
    assert "'loss': '5.312'" in line  # transformers 5 prints floats as formatted strings
    record = parse_line("[rank0]: " + line)
    assert record is not None and (record.step, record.epoch) == (None, None)
    assert record.values == {"loss": 5.312, "grad_norm": 1.5, "learning_rate": 4e-05, "epochs": 0.5}
    final = parse_line(
        trainer_printed({"train_runtime": 2.5, "train_loss": 1.25, "epoch": 1.0, "total_flos": 9}, capsys)
    )
    assert (
        final is not None
        and final.epoch == 1
        and final.values == {"train_runtime": 2.5, "train_loss": 1.25, "epochs": 1}
    )


@pytest.mark.parametrize(
    "line",
    [
        "{'lr': 0.1, 'batch_size': 32}",  # a script's config: no epoch, no Trainer record
        "{'epoch': 1}",  # a position alone
        "{'epoch': 1, 'loss': __import__('os').getcwd()}",  # never run, only read
        "config: {'epoch': 1, 'loss': 2.0} was used",  # a dict inside a sentence is not a printed record
        "{'epoch': 1, " + ", ".join(f"'k{i}': {i}" for i in range(600)) + "}",  # too long for a Trainer's record
    ],
)
def test_other_printed_dicts_are_no_records(line: str) -> None:
    warned: list[str] = []
    assert parse_line(line, warn=warned.append) is None and warned == []  # not a record, and nothing went wrong


@pytest.mark.slow
def test_an_attached_submit_shows_a_line_its_metrics_regex_reads_once() -> None:
    """With `metrics:` regexes declared, the attached view shows the script's own matched line once (not again as
    its record); `metrics` has every record."""
    overrides = ("-o", "local.nodes=1", "-o", "local.processes_per_node=2", "-o", "resources.nodes=1")
    result = cli("submit", str(FIXTURES / "ownscript" / "job.yaml"), *overrides, timeout=300)
    assert result.returncode == 0, result.stderr
    shown = result.stdout + result.stderr
    losses = [line for line in shown.splitlines() if "| loss " in line]
    assert len(losses) == 4 and len(set(losses)) == 4, shown  # 4 epochs, each once
    assert "loss=" not in shown, shown  # no record repeating a line
    run_id = shown.split("submitted ", 1)[1].split()[0]
    records = cli("metrics", run_id, "--json").stdout.splitlines()
    assert len([r for r in records if '"loss"' in r]) == 4, records
