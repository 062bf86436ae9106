"""``python -m bench [--tiny] [--only NAME …] [--out DIR]``: run the cases, write JSON + Markdown results."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

from .common import ROOT, Result, machine

CASES = {
    "throughput": "bench.throughput",
    "data-paths": "bench.data_paths",
    "render": "bench.render_latency",
    "launcher": "bench.launcher",
    "metrics": "bench.metrics_latency",
    "repeat": "bench.repeat_submit",
    "packaging": "bench.packaging",
    "rerender": "bench.rerender",
    "history": "bench.run_history",
    "interconnect": "bench.interconnect",
    "stacks": "bench.stacks",
}
TABLE_START, TABLE_END = "<!-- bench:start -->", "<!-- bench:end -->"


def to_markdown(results: list[Result], info: dict) -> str:
    lines = [
        f"Measured {info['date']} on {info['machine']['cpu']} ({info['machine']['cores']} cores, "
        f"{info['machine']['memory_gib']} GiB), Python {info['machine']['python']}"
        + (" — **tiny run, numbers not meaningful**" if info["tiny"] else "")
        + ".",
        "",
        "| case | metric | cloudddp | baseline | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        theirs = f"{r.theirs:.4g} {r.unit} ({r.baseline})" if r.theirs is not None else "—"
        ratio = f"{r.ratio:.2f}×" if r.ratio is not None else "—"
        met = {True: "yes", False: "**no**", None: "—"}[r.passed]
        extra = ", ".join(f"{k}={v}" for k, v in r.details.items() if not isinstance(v, list))
        lines.append(f"| {r.case} | {r.metric} | {r.ours:.4g} {r.unit} | {theirs} | {ratio} | {r.target} | {met} |")
        if extra:
            lines.append(f"| | *{extra}* | | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--tiny", action="store_true", help="each case once at a tiny size (used by make test)")
    parser.add_argument("--only", nargs="*", choices=list(CASES), help="run only these cases")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="folder for latest.json/.md")
    args = parser.parse_args(argv)
    results: list[Result] = []
    failed = []
    for name in args.only or CASES:
        print(f"== {name}", file=sys.stderr, flush=True)
        try:
            got = importlib.import_module(CASES[name]).measure(args.tiny)
        except Exception:  # noqa: BLE001 - one broken case must not hide the others' figures
            traceback.print_exc()
            failed.append(name)
            continue
        for r in got:
            print(
                f"   {r.metric}: {r.ours:.4g} {r.unit}"
                + (f" vs {r.theirs:.4g} ({r.baseline})" if r.theirs is not None else "")
                + (f", ratio {r.ratio:.2f}" if r.ratio is not None else ""),
                file=sys.stderr,
                flush=True,
            )
        results += got
    info = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(), "tiny": args.tiny}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps({**info, "results": [r.to_dict() for r in results]}, indent=2))
    table = to_markdown(results, info)
    (args.out / "latest.md").write_text(table)
    page = ROOT / "docs" / "benchmarks.md"
    if not args.tiny and not args.only and page.exists():
        text = page.read_text()
        if TABLE_START in text and TABLE_END in text:
            head, rest = text.split(TABLE_START, 1)
            _, tail = rest.split(TABLE_END, 1)
            page.write_text(f"{head}{TABLE_START}\n{table}{TABLE_END}{tail}")
    sys.stdout.write(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
