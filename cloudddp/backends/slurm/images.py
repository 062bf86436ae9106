"""Container images imported once to the shared filesystem, then run from that file by every node and task.

Without this, pyxis imports ``--container-image=<URI>`` on every node of every job, and Apptainer converts a
``docker://`` URI in every task. Here the batch script (on the job's first node, before srun) imports the image
into ``<workdir>/images/`` once per image reference: under ``flock``, so two jobs starting together import it
once; to a temporary name renamed into place only when the import succeeded and wrote a non-empty file, so a
killed import never leaves a file a later job would trust. srun/apptainer exec then get the file.

The import runs in the job, not at submit on the login node: ``enroot`` (pyxis) lives on the compute nodes
and is often missing on login nodes, and importing there needs no more network than pyxis's own per-node
import did. An image already given as a file (a ``.sqsh``/``.sif`` path) is used as it is.
"""

from __future__ import annotations

import hashlib
import re
import shlex

from cloudddp.backends.slurm.options import Container

IMPORT_MARK = "cloudddp: importing container image"
REUSE_MARK = "cloudddp: container image"


def is_file(container: Container) -> bool:
    """Whether the image is a file already: a path for pyxis (``/`` or ``.``), anything without ``://`` for
    Apptainer (a ``.sif`` path)."""
    if container.runtime == "pyxis":
        return container.image.startswith(("/", "."))
    return "://" not in container.image


def image_file(container: Container, workdir: str) -> str:
    """The file every task runs: the imported one in ``<workdir>/images/``, keyed on the image reference (a
    readable tail of it, then its sha256), or the image itself when it is a file already."""
    if is_file(container):
        return container.image
    digest = hashlib.sha256(f"{container.runtime}\0{container.image}".encode()).hexdigest()[:16]
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", container.image.rsplit("/", 1)[-1])[-48:]
    suffix = ".sqsh" if container.runtime == "pyxis" else ".sif"
    return f"{workdir}/images/{readable}-{digest}{suffix}"


def import_lines(container: Container, workdir: str) -> list[str]:
    """Bash lines that import the image once (nothing when it is a file already)."""
    if is_file(container):
        return []
    q = shlex.quote
    target = image_file(container, workdir)
    if container.runtime == "pyxis":
        uri = container.image if "://" in container.image else f"docker://{container.image}"
        command = f'enroot import --output "$part" {q(uri)}'
    else:
        command = f'apptainer pull "$part" {q(container.image)}'
    return [
        "",
        "# The container image, imported once per image reference to the shared filesystem (under a lock: jobs",
        "# starting together import it once), then used from that file by every node and task.",
        f"image={q(target)}",
        'if [ ! -s "$image" ]; then',
        '  mkdir -p "${image%/*}"',
        "  (",
        "    flock 9 || exit 1",
        '    [ -s "$image" ] && exit 0  # another job imported it while this one waited',
        f'    echo "{IMPORT_MARK} {container.image} to $image"',
        '    part="$image.part-${SLURM_JOB_ID:-$$}"; rm -f "$part"',
        f'    {command} && [ -s "$part" ] && mv -f "$part" "$image" && exit 0',
        '    rm -f "$part"; exit 1',
        '  ) 9>"$image.lock" || { echo "cloudddp: importing the container image failed (see above)" >&2; exit 1; }',
        "else",
        f'  echo "{REUSE_MARK} $image (imported before)"',
        "fi",
    ]
