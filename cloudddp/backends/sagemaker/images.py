"""The official PyTorch training image (AWS Deep Learning Container) for a region, version and Python.

The image table is data kept in the package, ``cloudddp/data/sagemaker_pytorch_training.json``: the
training scope of the SageMaker SDK's own ``image_uri_config/pytorch.json`` (its ``source`` and ``date``
say which release), cut to the versions AWS still lists. Render reads it without the ~1 GB SDK, without
network and without importing any cloud SDK. The same file says which versions ship the SageMaker
data-parallel library (smddp) in their official image, the Amazon Linux 2023 images (2.11 and later:
repository ``pytorch``, tags such as ``2.13-cu133-amzn2023-sagemaker``, from AWS's DLC documentation, which
the SDK's file does not list yet), and each version's end of patch support (``support``), from which the
default version is chosen: the newest AWS still patches.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from typing import Any

from cloudddp.errors import UserError
from cloudddp.paths import data_text

DATA_FILE = "sagemaker_pytorch_training.json"
DEFAULT_DOMAIN = "amazonaws.com"
# An official PyTorch training image names its version in the tag: .../pytorch-training:2.4-gpu-py311
# (or, for the Amazon Linux 2023 images, .../pytorch:2.13-cu133-amzn2023-sagemaker).
_OFFICIAL_TAG = re.compile(
    r"\.dkr\.ecr\.[^/]+/(?:pytorch-training:(\d+\.\d+(?:\.\d+)?)-gpu-|pytorch:(\d+\.\d+(?:\.\d+)?)-cu\d+-amzn2023)"
)


@functools.cache
def table() -> dict[str, Any]:
    """The packaged image table (loaded once)."""
    text = data_text(DATA_FILE)
    data: dict[str, Any] = json.loads(text)
    return data


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def offered_versions() -> list[str]:
    """Every full framework version with an official training image, oldest first."""
    return sorted(table()["versions"], key=_version_key)


def full_version(version: str) -> str | None:
    """``2.4`` → ``2.4.0``; a full version stays as it is; None when no official image has it."""
    data = table()
    full = data["version_aliases"].get(version, version)
    return full if full in data["versions"] else None


def end_of_support(full: str) -> datetime.date | None:
    """The last day AWS patches the images of this version (its minor version's ``eop``), if known."""
    minor = ".".join(full.split(".")[:2])
    entry = table().get("support", {}).get("versions", {}).get(minor)
    return datetime.date.fromisoformat(entry["eop"]) if entry else None


def short_form(full: str) -> str:
    """``2.13.0`` → ``2.13`` (the tag AWS moves with each patch release), when that alias exists."""
    return next((alias for alias, target in table()["version_aliases"].items() if target == full), full)


def default_version(smddp: bool, today: datetime.date | None = None) -> tuple[str, str]:
    """(version, why) when the spec names none: the newest with patch support on ``today``; for smddp the
    newest whose image has the library (all of those may be past their patch support: the plan says so)."""
    today = today or datetime.date.today()
    if smddp:
        full = smddp_versions()[-1]
        end = end_of_support(full)
        late = f", out of AWS patch support since {end}" if end and end < today else ""
        return short_form(full), f"the newest official image with the smddp library{late}"
    patched = [v for v in offered_versions() if (end_of_support(v) or datetime.date.min) >= today]
    if patched:
        return short_form(
            patched[-1]
        ), f"the newest official image AWS still patches (until {end_of_support(patched[-1])})"
    return short_form(offered_versions()[-1]), "the newest official image (none is in patch support any more)"


def smddp_versions() -> list[str]:
    """Framework versions whose official training image carries the smddp library."""
    return list(table()["smddp"]["framework_versions"])


def _check_smddp(full: str, where: str, field: str) -> None:
    supported = smddp_versions()
    if full in supported:
        return
    newest = supported[-1].rsplit(".", 1)[0]
    fix = f"framework_version: {newest}" if field == "framework_version" else f"image: an official {newest} image"
    raise UserError(
        f"distribution.backend smddp: the official PyTorch {full} training image ({where}) has no SageMaker "
        f"data-parallel library; versions with it: {', '.join(supported)} "
        f"(cloudddp/data/{DATA_FILE}; sources in cloudddp/data/SOURCES.md)",
        hint=f"set sagemaker.{fix} (or another version listed), or distribution.backend: nccl",
    )


def _py_version(entry: dict[str, Any], full: str, py_version: str | None) -> str:
    offered: list[str] = entry["py_versions"]
    if py_version is None:
        if len(offered) == 1:
            return offered[0]
        raise UserError(f"sagemaker.py_version: PyTorch {full} images are built for {', '.join(offered)}: name one")
    if py_version not in offered:
        raise UserError(
            f"sagemaker.py_version {py_version!r}: the PyTorch {full} training image is built for "
            f"{', '.join(offered)} only",
            hint=f"set sagemaker.py_version: {offered[-1]} or leave it out",
        )
    return py_version


def official_image(region: str, version: str, py_version: str | None, gpu: bool) -> str:
    """The official image URI, as the SageMaker SDK's ``image_uris.retrieve`` builds it (the tag keeps the
    version as given, e.g. ``2.4-gpu-py311``)."""
    data = table()
    full = full_version(version)
    if full is None:
        raise UserError(
            f"sagemaker.framework_version {version!r}: no official PyTorch training image "
            f"(offered: {', '.join(offered_versions())}, or their short form such as 2.4)",
            hint="pick an offered version, or name your own image in sagemaker.image",
        )
    entry = data["versions"][full]
    py = _py_version(entry, full, py_version)
    processor = "gpu" if gpu else "cpu"
    if processor not in entry["processors"]:
        raise UserError(
            f"sagemaker.framework_version {version!r}: no {processor.upper()} training image "
            f"(offered: {', '.join(entry['processors'])})"
        )
    account = entry["registries"].get(region)
    if account is None:
        raise UserError(
            f"sagemaker.region {region!r}: no official PyTorch {full} training image there "
            f"(regions: {', '.join(sorted(entry['registries']))})",
            hint="pick one of those regions, or name your own image in sagemaker.image",
        )
    domain = data["ecr_domains"].get(region, DEFAULT_DOMAIN)
    tag = entry["tag"][processor].format(version=version) if "tag" in entry else f"{version}-{processor}-{py}"
    return f"{account}.dkr.ecr.{region}.{domain}/{entry['repository']}:{tag}"


_ECR_IMAGE = re.compile(r"^(\d{12})\.dkr\.ecr\.[^/]+/([^:@]+)")


def is_official(image: str) -> bool:
    """Whether ``image`` is an AWS PyTorch training DLC (its account and repository in the image table): those
    have the DLC entry that runs AWS's training toolkit (torchrun, smddp, MPI)."""
    found = _ECR_IMAGE.match(image)
    if found is None:
        return False
    entries = table()["versions"].values()
    return any(found.group(1) in e["registries"].values() and found.group(2) == e["repository"] for e in entries)


def support_warning(image: str, today: datetime.date | None = None) -> str | None:
    """A warning for an official image whose PyTorch version AWS no longer patches (None for any other image)."""
    tagged = _OFFICIAL_TAG.search(image)
    full = full_version(tagged.group(1) or tagged.group(2)) if tagged else None
    end = end_of_support(full) if full else None
    if end is None or end >= (today or datetime.date.today()):
        return None
    newest, _ = default_version(smddp=False, today=today)
    return (
        f"sagemaker.image {image}: PyTorch {full} is out of AWS patch support since {end} (no security fixes); "
        f"leave sagemaker.image out and cloudddp picks the newest image AWS still patches ({newest}, or the newest "
        "with SageMaker's data-parallel library for a job that uses it), or set sagemaker.framework_version"
    )


def training_image(
    image: str | None, region: str, version: str | None, py_version: str | None, gpu: bool, *, smddp: bool = False
) -> tuple[str, str]:
    """(image URI, how it was found). With ``smddp``, a framework version whose official image lacks the
    library is refused; a named image is checked when its tag shows an official version."""
    if image:
        tagged = _OFFICIAL_TAG.search(image)
        full = full_version(tagged.group(1) or tagged.group(2)) if tagged else None
        if smddp and full is not None:
            _check_smddp(full, f"sagemaker.image {image}", "image")
        return image, "image named in the spec (sagemaker.image)"
    chosen = ""
    if version is None:
        version, why = default_version(smddp)
        chosen = f"; PyTorch {version}: {why} (set sagemaker.framework_version to choose)"
    uri = official_image(region, version, py_version, gpu)
    full = full_version(version)
    if smddp and full is not None:
        _check_smddp(full, f"sagemaker.framework_version {version}", "framework_version")
    return uri, f"official PyTorch training image (cloudddp/data/{DATA_FILE} of {table()['date']}{chosen})"
