"""Where a SageMaker plan goes besides its CreateTrainingJob request: the region, and the training's checkpoint
folder in S3 with what a write there carries (the default bucket's expected owner, the spec's KMS key)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cloudddp.plan import Target


@dataclass(frozen=True, kw_only=True)
class SageMakerTarget(Target):
    region: str
    checkpoints: str | None = None
    bucket_owner: str | None = None
    """The account that must own the default bucket (``{ACCOUNT}``, bound at launch); None for the spec's bucket."""
    kms_key: str | None = None

    omitted_when_none: ClassVar[frozenset[str]] = frozenset({"checkpoints", "bucket_owner", "kms_key"})
