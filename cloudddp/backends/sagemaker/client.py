"""The SageMaker backend's AWS side: boto3 clients from one session, and botocore's errors as cloudddp's.

boto3 and botocore are imported here, when a client is first asked for or an error is mapped: never at render.
"""

from __future__ import annotations

from typing import Any

from cloudddp.errors import BackendUnavailable, CloudDDPError, UserError

CREDENTIALS_FIX = "run `aws configure` (or `aws sso login`), or export AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
_AUTH_CODES = {
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "AccessDeniedException",
    "InvalidAccessKeyId",
}


class AwsClients:
    """The clients of one backend object: the boto3 session it was given, else one made at the first call in the
    region that call names (later calls name their own region on that session)."""

    def __init__(self, session: Any = None) -> None:
        self._session = session

    def session(self, region: str) -> Any:
        if self._session is None:
            try:
                import boto3
            except ImportError:
                raise BackendUnavailable("the SageMaker backend needs boto3: pip install 'cloudddp[aws]'") from None
            self._session = boto3.session.Session(region_name=region)
        return self._session

    def client(self, service: str, region: str, attempts: int = 8) -> Any:
        """A ``service`` client in ``region`` with botocore's standard retry mode, ``attempts`` tries a call."""
        from botocore.config import Config

        config = Config(retries={"mode": "standard", "max_attempts": attempts}, user_agent_extra="cloudddp")
        return self.session(region).client(service, region_name=region, config=config)

    def account(self, region: str) -> str:
        """The caller's AWS account (STS), which the default bucket's name and owner check carry."""
        return str(self.client("sts", region).get_caller_identity()["Account"])


def translate(error: Exception) -> CloudDDPError | None:
    """botocore's errors, in one place: credentials and permissions exit 2 with the fix."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        TokenRetrievalError,
    )

    if isinstance(error, (NoCredentialsError, PartialCredentialsError, TokenRetrievalError)):
        return BackendUnavailable(f"no usable AWS credentials: {error}", hint=CREDENTIALS_FIX)
    if isinstance(error, NoRegionError):
        return UserError("no AWS region: set sagemaker.region in the spec, or AWS_REGION")
    if isinstance(error, EndpointConnectionError):
        return CloudDDPError(f"cannot reach AWS: {error}")
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", str(error))
        if code in _AUTH_CODES:
            return BackendUnavailable(f"AWS refused these credentials ({code}): {message}", hint=CREDENTIALS_FIX)
        return CloudDDPError(f"SageMaker refused the request ({code}): {message}")
    return None
