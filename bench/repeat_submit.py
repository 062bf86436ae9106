"""Repeat submit: bytes uploaded and time for a second submit of unchanged code and data, through the emulators.

SageMaker: moto as an HTTP server; the baseline is the SageMaker SDK's behaviour of uploading
``sourcedir.tar.gz`` under each job's own prefix, i.e. the whole snapshot every time. Azure ML: the
real azure-ai-ml SDK against the offline workspace with Azurite; cloudddp submits through the SDK,
whose content-hash lookup is what skips the upload.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, Result

sys.path.insert(0, str(ROOT))


def _sagemaker(tiny: bool) -> Result:
    from cloudddp.backends.plugins import spec_from_dict
    from cloudddp.backends.sagemaker import SageMakerBackend
    from tests.support.aws_emulator import moto_server

    with moto_server() as url, tempfile.TemporaryDirectory() as tmp:
        saved = {
            k: os.environ.get(k)
            for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "CLOUDDDP_HOME")
        }
        os.environ.update(
            AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", CLOUDDDP_HOME=tmp
        )
        try:
            data = Path(tmp) / "data"
            data.mkdir()
            (data / "shard-0.bin").write_bytes(os.urandom(256 * 1024 if tiny else 8 * 2**20))
            spec = spec_from_dict(
                {
                    "name": "bench-repeat",
                    "code": {"dir": str(ROOT / "src_train"), "args": ["--dataset", "cifar10"]},
                    "inputs": {"train": {"path": str(data), "arg": "--data-dir"}},
                    "resources": {"nodes": 1, "gpus_per_node": 8},
                    "sagemaker": {
                        "region": "us-east-1",
                        "role": "arn:aws:iam::123456789012:role/r",
                        "bucket": "bench-bucket",
                        "instance_type": "ml.p4d.24xlarge",
                        "image": "img:1",
                    },
                }
            )
            times, sent = [], []
            for token in ("first", "second"):
                backend = SageMakerBackend(token=token)
                started = time.perf_counter()
                run_id = backend.launch(backend.render(spec), checks=False)
                times.append(time.perf_counter() - started)
                sent.append(sum(backend.records.get(run_id).info["uploaded_bytes"]))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return Result(
        case="repeat submit",
        metric="SageMaker: bytes uploaded by the 2nd submit",
        ours=sent[1],
        theirs=sent[0],
        unit="bytes",
        better="lower",
        baseline="whole snapshot again (SDK: per-job prefix)",
        target="0 bytes",
        passed=sent[1] == 0,
        details={"first_submit_s": round(times[0], 3), "second_submit_s": round(times[1], 3), "first_bytes": sent[0]},
    )


def _azureml(tiny: bool) -> Result:
    from cloudddp.backends.azureml import AzureMLBackend
    from cloudddp.backends.plugins import load_spec
    from tests.support.azure_rig import FakeCredential, WorkspaceModel, azurite, create_container, ml_transport

    with tempfile.TemporaryDirectory() as tmp:
        saved = os.environ.get("CLOUDDDP_HOME")
        os.environ["CLOUDDDP_HOME"] = tmp
        try:
            with azurite(Path(tmp) / "azurite") as endpoint:
                model = WorkspaceModel(endpoint)
                create_container(model)
                spec = load_spec(ROOT / "jobs" / "cifar10-azureml.yaml")

                def uploaded() -> int:
                    return sum(b.size for b in model.container_client().list_blobs(name_starts_with="LocalUpload/"))

                times, sent = [], []
                for token in ("first", "second"):
                    backend = AzureMLBackend(credential=FakeCredential(), transport=ml_transport(model), token=token)
                    before = uploaded()
                    started = time.perf_counter()
                    backend.launch(backend.render(spec))
                    times.append(time.perf_counter() - started)
                    sent.append(uploaded() - before)
        finally:
            if saved is None:
                os.environ.pop("CLOUDDDP_HOME", None)
            else:
                os.environ["CLOUDDDP_HOME"] = saved
    return Result(
        case="repeat submit",
        metric="Azure ML: bytes uploaded by the 2nd submit",
        ours=sent[1],
        theirs=None,
        unit="bytes",
        better="lower",
        target="0 bytes",
        passed=sent[1] == 0,
        details={"first_submit_s": round(times[0], 3), "second_submit_s": round(times[1], 3), "first_bytes": sent[0]},
    )


def measure(tiny: bool) -> list[Result]:
    return [_sagemaker(tiny), _azureml(tiny)]
