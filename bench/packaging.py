"""Packaging: the code snapshot of a folder with one 600 MB file, and of one with 20,000 small files,
against ``tar czf`` of the same folder (wall time and peak memory of each whole process).

cloudddp's side is a process that packs the folder into an empty snapshot cache (so it really packs);
``tar czf`` writes the same kind of archive at the same compression level (tar, ``gzip -6``) to a file. The two
alternate, rep by rep, so both see the same machine; each row gives the medians, both archives' sizes and the
load average around the runs (the machine is shared: only the side-by-side ratio means something).
"""

from __future__ import annotations

import os
import sys
import tempfile
from functools import partial
from pathlib import Path

from .common import ROOT, Result, median
from .process_stats import how_memory_is_measured, measured

sys.path.insert(0, str(ROOT))

WORK = Path(tempfile.gettempdir()) / "cloudddp-bench"
PACK = "import sys; from pathlib import Path; from cloudddp.code.snapshot import pack; pack(Path(sys.argv[1]))"
LEVEL = 6  # gzip's default, and cloudddp's


def tree(kind: str, tiny: bool) -> tuple[Path, str]:
    """A generated folder, kept in the temp folder between runs, dated an hour back (not just edited)."""
    from tests.support.trees import age, many_small_files_tree, one_big_file_tree

    if kind == "one-file":
        size = 3_000_000 if tiny else 600_000_000
        root, label = WORK / f"one-file-{size}", f"one {size / 1e6:g} MB file"
        make = partial(one_big_file_tree, root, size)
    else:
        count = 200 if tiny else 20_000
        root, label = WORK / f"small-files-{count}", f"{count:,} small files"
        make = partial(many_small_files_tree, root, count)
    done = root.with_name(root.name + ".complete")
    if not done.exists():
        make()
        age(root)
        done.touch()
    return root, label


def _compare(root: Path, label: str, reps: int) -> list[Result]:
    ours, theirs, load = [], [], [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        for rep in range(reps):
            home = Path(tmp) / f"home{rep}"  # an empty snapshot cache: every rep packs
            ours.append(measured([sys.executable, "-c", PACK, str(root)], env={"CLOUDDDP_HOME": str(home)}))
            archive = Path(tmp) / f"tar{rep}.tgz"
            theirs.append(measured(["tar", "-c", "-I", f"gzip -{LEVEL}", "-f", str(archive), "-C", str(root), "."]))
            ours_size = sum(p.stat().st_size for p in (home / "snapshots").glob("*.tar.gz"))
            size = archive.stat().st_size
        load.append(os.getloadavg()[0])
    o_wall, t_wall = median([m.wall_s for m in ours]), median([m.wall_s for m in theirs])
    o_mem, t_mem = max(m.peak_mb for m in ours), max(m.peak_mb for m in theirs)
    details = {
        "reps": reps,
        "gzip_level": LEVEL,
        "ours_archive_mb": round(ours_size / 1e6, 3),
        "tar_archive_mb": round(size / 1e6, 3),
        "load_before_after": "/".join(f"{x:.1f}" for x in load),
        "memory_from": how_memory_is_measured(),
    }
    return [
        Result(
            case="packaging",
            metric=f"{label}: wall time",
            ours=o_wall,
            theirs=t_wall,
            unit="s",
            ratio=t_wall / o_wall,
            better="higher ratio",
            baseline=f"tar czf, gzip -{LEVEL}",
            target="≤ 1.1× tar czf",
            passed=o_wall <= 1.1 * t_wall,
            details=details,
        ),
        Result(
            case="packaging",
            metric=f"{label}: peak memory",
            ours=o_mem,
            theirs=t_mem,
            unit="MB",
            ratio=t_mem / o_mem,
            better="lower",
            baseline=f"tar czf, gzip -{LEVEL}",
            target="< 100 MB",
            passed=o_mem < 100,
            details=details,
        ),
    ]


def measure(tiny: bool) -> list[Result]:
    WORK.mkdir(parents=True, exist_ok=True)
    results = []
    for kind, reps in (("one-file", 1 if tiny else 3), ("small-files", 1 if tiny else 5)):
        root, label = tree(kind, tiny)
        results += _compare(root, label, reps)
    return results
