"""The official PyTorch training image (AWS Deep Learning Container) for a region, version and Python.

When the ``sagemaker`` extra is installed, its bundled registry file
(``sagemaker/core/image_uri_config/pytorch.json``) is read directly — found with importlib without
importing the SDK, whose import costs seconds. Otherwise the spec must name ``sagemaker.image``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from ...errors import UserError

_CANDIDATES = ("core/image_uri_config/pytorch.json", "image_uri_config/pytorch.json")


def registry_file() -> Path | None:
    """The SDK's pytorch.json, if the SDK is installed (without importing it)."""
    try:
        found = importlib.util.find_spec("sagemaker")
    except (ImportError, ValueError):
        return None
    for location in (found.submodule_search_locations or []) if found else []:
        for rel in _CANDIDATES:
            path = Path(location) / rel
            if path.is_file():
                return path
    return None


def image_from_registry(config: Path, region: str, version: str, py_version: str, gpu: bool) -> str:
    data = json.loads(config.read_text())
    scope = data.get("training", data)
    versions = scope.get("versions", {})
    full = scope.get("version_aliases", {}).get(version, version)
    entry = versions.get(full)
    if entry is None:
        known = ", ".join(sorted(set(scope.get("version_aliases", {})) | set(versions)))
        raise UserError(f"sagemaker.framework_version {version!r} is not in the SDK's PyTorch image registry (known: {known})")
    if py_version not in entry.get("py_versions", []):
        raise UserError(f"sagemaker.py_version {py_version!r} is not offered for PyTorch {version} "
                        f"(offered: {', '.join(entry.get('py_versions', []))})")
    account = entry.get("registries", {}).get(region)
    if account is None:
        raise UserError(f"no PyTorch {version} training image in region {region!r}")
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    processor = "gpu" if gpu else "cpu"
    return f"{account}.dkr.ecr.{region}.{domain}/{entry.get('repository', 'pytorch-training')}:{version}-{processor}-{py_version}"


def training_image(image: str | None, region: str, version: str, py_version: str, gpu: bool) -> tuple[str, str]:
    """(image URI, how it was found)."""
    if image:
        return image, "image named in the spec (sagemaker.image)"
    config = registry_file()
    if config is None:
        raise UserError(
            "sagemaker.image is not set, and the SageMaker SDK's image registry is not installed",
            hint=f"set sagemaker.image (e.g. 763104351884.dkr.ecr.{region}.amazonaws.com/pytorch-training:"
                 f"{version}-{'gpu' if gpu else 'cpu'}-{py_version}) or pip install 'cloudddp[sagemaker]'",
        )
    return image_from_registry(config, region, version, py_version, gpu), f"official PyTorch DLC from {config}"
