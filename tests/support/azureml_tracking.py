"""Azure ML's MLflow tracking as the azureml-mlflow plugin reaches it, in front of a real ``mlflow server``.

A workspace reports ``azureml://<host>/mlflow/v1.0/subscriptions/<s>/resourceGroups/<g>/providers/
Microsoft.MachineLearningServices/workspaces/<w>`` as its tracking URI. With azureml-mlflow installed,
azure-ai-ml's ``workspaces.get`` registers the MLClient's credential for that URI with the plugin
(``azureml.mlflow.get_mlflow_tracking_uri_v2``), and the plugin's store (the ``azureml`` scheme's) turns it into
``https://<host>/mlflow/v2.0/<that workspace scope>/api/2.0/mlflow/...``, each request signed with a bearer
token from that credential (the rig's :class:`~tests.support.azure_rig.FakeCredential`).

The front serves HTTPS on 127.0.0.1 with a certificate made for the test (its CA file is what
``REQUESTS_CA_BUNDLE`` names), refuses a request without the credential's token (401, as the service does) and
forwards the MLflow REST call, less the workspace prefix, to the MLflow server. It counts what it served, so a
test can tell the plugin's path was taken.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import ssl
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TOKEN = "rig-token"
"""The token the rig's credential issues (FakeCredential)."""
_SCOPE = re.compile(
    r"^/mlflow/v[12]\.0/subscriptions/[^/]+/resourceGroups/[^/]+/providers/"
    r"Microsoft\.MachineLearningServices/workspaces/[^/]+(/api/2\.0/mlflow/.*)$"
)


@dataclass
class Served:
    """What the front and the identity endpoint answered, by kind."""

    counts: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class Tracking:
    """The running pair: the tracking URI a workspace reports, and what a client process needs in its
    environment to reach it as the plugin would reach Azure."""

    uri: str
    environment: dict[str, str]
    served: Served


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made now (the certificate is its own CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "tracking-cert.pem", folder / "tracking-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def _handler(mlflow_url: str, served: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self, method: str) -> None:
            path, _, query = self.path.partition("?")
            scoped = _SCOPE.match(path)
            if scoped is None:
                self._answer(404, b'{"error": {"code": "NotFound"}}')
                return
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                served.counts["unauthorized"] += 1
                self._answer(401, b'{"error": {"code": "Unauthorized"}}')
                return
            served.counts["mlflow"] += 1
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else None
            target = mlflow_url + scoped.group(1) + (f"?{query}" if query else "")
            request = urllib.request.Request(target, data=data, method=method)
            request.add_header("Content-Type", self.headers.get("Content-Type") or "application/json")
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    self._answer(answer.status, answer.read(), answer.headers.get("Content-Type", "application/json"))
            except urllib.error.HTTPError as e:
                self._answer(e.code, e.read())

        def do_GET(self) -> None:
            self._forward("GET")

        def do_POST(self) -> None:
            self._forward("POST")

    return Handler


@contextmanager
def azureml_tracking(mlflow_url: str, folder: Path) -> Iterator[Tracking]:
    """The HTTPS front for the MLflow server at ``mlflow_url``, while the context lasts."""
    served = Served()
    cert, key = self_signed(folder)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    front = ThreadingHTTPServer(("127.0.0.1", 0), _handler(mlflow_url, served))
    front.socket = context.wrap_socket(front.socket, server_side=True)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    scope = (
        "subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/ml-rg/providers/"
        "Microsoft.MachineLearningServices/workspaces/ml-workspace"
    )
    try:
        yield Tracking(
            uri=f"azureml://127.0.0.1:{front.server_address[1]}/mlflow/v1.0/{scope}",
            environment={"REQUESTS_CA_BUNDLE": str(cert)},
            served=served,
        )
    finally:
        front.shutdown()
        front.server_close()
