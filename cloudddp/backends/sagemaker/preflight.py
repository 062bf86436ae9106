"""What submit checks before it sends a SageMaker plan: credentials (STS), each input the job reads from S3 that
submit does not upload itself, and the instance type's quota (:mod:`.quotas`)."""

from __future__ import annotations

from typing import Any

from cloudddp.backends.checks import Check
from cloudddp.backends.sagemaker.client import CREDENTIALS_FIX, AwsClients
from cloudddp.backends.sagemaker.quotas import quota_check
from cloudddp.backends.sagemaker.target import SageMakerTarget
from cloudddp.plan import Plan


def preflight(plan: Plan[dict[str, Any], SageMakerTarget], clients: AwsClients) -> list[Check]:
    """The plan's checks; without usable credentials, that one failed check alone."""
    region = plan.target.region
    try:
        identity = clients.client("sts", region).get_caller_identity()
    except Exception as e:  # noqa: BLE001 - any failure here means "no usable credentials"
        return [Check("AWS credentials", False, str(e).splitlines()[0], fix=CREDENTIALS_FIX)]
    checks = [Check("AWS credentials", True, f"account {identity['Account']}")]
    s3 = clients.client("s3", region, attempts=2)
    for channel in plan.request.get("InputDataConfig", []):
        uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
        if any(u["destination"] == uri for u in plan.uploads):
            continue  # uploaded by submit itself
        checks.append(_input_check(s3, channel["ChannelName"], uri))
    itype = plan.request["ResourceConfig"]["InstanceType"]
    count = plan.request["ResourceConfig"]["InstanceCount"]
    spot = bool(plan.request.get("EnableManagedSpotTraining"))
    checks.append(quota_check(clients.client("service-quotas", region, attempts=2), itype, count, spot))
    return checks


def _input_check(s3: Any, channel: str, uri: str) -> Check:
    """Something under input ``channel``'s ``uri`` that these credentials may list."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    try:
        found = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1).get("KeyCount", 0) > 0
    except Exception as e:  # noqa: BLE001
        return Check(
            f"input {channel} reachable",
            False,
            f"{uri}: {str(e).splitlines()[0]}",
            fix="check the URI and that these credentials may read it",
        )
    return Check(
        f"input {channel} reachable",
        found,
        uri if found else f"nothing under {uri}",
        fix="upload the data there, or fix inputs.<name>",
    )
