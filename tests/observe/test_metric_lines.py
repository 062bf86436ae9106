"""Metric lines from any backend's logs: a line no parser can hold is one warning, never the end of the stream."""

from __future__ import annotations

import pytest

from cloudddp.observe.metrics import metrics_from_lines, parse_line


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
