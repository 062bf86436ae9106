"""The official PyTorch training image from cloudddp's own data: no SageMaker SDK at render, and the data
checked against the SDK's own file (from the sagemaker-core wheel the data names, which `make test` downloads
without installing it) and botocore's ECR endpoints."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from cloudddp.backends.plugins import load_spec
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.sagemaker.images import offered_versions, official_image, smddp_versions, table
from cloudddp.errors import UserError
from tests.backends.sagemaker.jobs import SMDDP_JOB
from tests.support.cli import ROOT, cli
from tests.support.rigs import rig_unavailable


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def test_render_finds_the_official_image_with_the_sdk_unimportable(tmp_path: Path) -> None:
    """The smddp job without sagemaker.image renders in a plain environment: a `sagemaker` package that
    refuses to import sits first on the path, so any use of the SDK would fail the render."""
    blocker = tmp_path / "blocker" / "sagemaker"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('the SageMaker SDK must not be needed at render')\n")
    env = {"PYTHONPATH": f"{blocker.parent}:{ROOT}"}
    for override in ("sagemaker.image=", "sagemaker.image=null"):
        result = cli("render", str(SMDDP_JOB), "-b", "sagemaker", "--json", "-o", override, env=env)
        assert result.returncode == 0, result.stderr
        request = json.loads(result.stdout)["request"]
        assert (
            request["AlgorithmSpecification"]["TrainingImage"]
            == "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-gpu-py311"  # newest with smddp
        )


def test_tag_keeps_the_version_as_given_and_cpu_jobs_get_the_cpu_image() -> None:
    assert official_image("eu-west-1", "2.5.1", None, gpu=False).endswith("/pytorch-training:2.5.1-cpu-py311")
    assert official_image("us-west-2", "2.10", None, gpu=True).endswith("/pytorch-training:2.10-gpu-py313")


def test_ecr_hosts_match_botocores_endpoints() -> None:
    """The domain of each region (amazonaws.com, .com.cn, the isolated partitions) is what botocore's ECR
    endpoint says, as the SDK builds it ({account}.dkr.{ecr hostname})."""
    import botocore.session
    from botocore.regions import EndpointResolver

    resolver = EndpointResolver(botocore.session.get_session().get_data("endpoints"))
    newest = offered_versions()[-1]
    for region, account in table()["versions"][newest]["registries"].items():
        host = resolver.construct_endpoint("ecr", region)["hostname"]
        uri = official_image(region, newest, None, gpu=True)
        assert uri.startswith(f"{account}.dkr.{host}/"), (region, uri)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("sagemaker.framework_version='2.14'", ["'2.14'", "1.13.1", "2.13.0"]),
        ("sagemaker.py_version=py310", ["py310", "py311"]),
        ("sagemaker.region=xx-east-9", ["'xx-east-9'", "us-east-1", "eu-west-1"]),
    ],
)
def test_a_combination_without_an_image_names_what_exists(override: str, named: list[str]) -> None:
    result = cli("render", str(SMDDP_JOB), "-b", "sagemaker", "-o", "sagemaker.image=", "-o", override)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    for text in named:
        assert text in result.stderr


def test_smddp_is_refused_on_a_version_without_the_library_naming_those_with_it() -> None:
    result = cli(
        "render", str(SMDDP_JOB), "-b", "sagemaker", "-o", "sagemaker.image=", "-o", "sagemaker.framework_version='2.8'"
    )
    assert result.returncode == 2
    assert "smddp" in result.stderr and "2.8.0" in result.stderr
    assert all(v in result.stderr for v in smddp_versions())
    named = cli(
        "render",
        str(SMDDP_JOB),
        "-b",
        "sagemaker",
        "-o",
        "sagemaker.image=763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.7-gpu-py312",
    )
    assert named.returncode == 2 and "2.7.1" in named.stderr and "sagemaker.image" in named.stderr


def test_smddp_versions_render_and_custom_images_are_not_second_guessed() -> None:
    for version in ("2.5", "2.3.0"):
        spec = load_spec(SMDDP_JOB, ["sagemaker.image=", f"sagemaker.framework_version='{version}'"])
        image = SageMakerBackend().render(spec).request["AlgorithmSpecification"]["TrainingImage"]
        assert f"pytorch-training:{version}-gpu-" in image
    spec = load_spec(SMDDP_JOB, ["sagemaker.image=123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:2.8"])
    assert SageMakerBackend().render(spec).request["AlgorithmSpecification"]["TrainingImage"].endswith("/mine:2.8")
    with pytest.raises(UserError, match=r"2\.8\.0"):
        SageMakerBackend().render(load_spec(SMDDP_JOB, ["sagemaker.image=", "sagemaker.framework_version='2.8'"]))


def test_an_unquoted_version_is_refused_before_yaml_turns_2_10_into_2_1() -> None:
    result = cli("validate", str(SMDDP_JOB), "-o", "sagemaker.framework_version=2.10")
    assert result.returncode == 2 and 'in quotes, e.g. "2.10"' in result.stderr


SDK_WHEELS = ROOT / ".venv" / "sdk-data"
"""Where `make sdk-data` (part of `make test`) downloads the sagemaker-core wheel the image data was taken from."""
SDK_FILE = "sagemaker/core/image_uri_config/pytorch.json"


def _sdk_pytorch_json() -> tuple[str, bytes]:
    """The SDK's own pytorch.json, read from the wheel of the version the data names (no import, no install)."""
    source = table()["source"]
    version = re.search(r"sagemaker-core (\S+)", source)
    assert version, f"the image data does not name the sagemaker-core release it came from: {source}"
    wheel = SDK_WHEELS / f"sagemaker_core-{version.group(1)}-py3-none-any.whl"
    if not wheel.is_file():
        rig_unavailable(f"{wheel.name} is not downloaded (`make sdk-data`): the image data is not cross-checked")
    with zipfile.ZipFile(wheel) as archive:
        return wheel.name, archive.read(SDK_FILE)


def test_data_agrees_with_the_sagemaker_sdks_own_file() -> None:
    wheel, raw = _sdk_pytorch_json()
    sdk_file = f"{wheel}:{SDK_FILE}"
    sdk = json.loads(raw)["training"]
    ours = table()
    al2023 = set(ours["al2023"]["versions"])  # from AWS's DLC docs; the SDK's file may not list them yet
    oldest = _version_key(offered_versions()[0])
    newer_in_sdk = {v for v in sdk["versions"] if _version_key(v) >= oldest}
    assert newer_in_sdk - al2023 == set(ours["versions"]) - al2023, f"{sdk_file} offers other versions: refresh"
    for version, entry in ours["versions"].items():
        if version in al2023 and version not in sdk["versions"]:
            continue
        theirs = sdk["versions"][version]
        assert entry["py_versions"] == theirs["py_versions"], version
        assert entry["repository"] == theirs["repository"], version
        assert entry["registries"] == theirs["registries"], version
        assert entry["processors"] == theirs.get("processors", sdk["processors"]), version
    aliases = {a: f for a, f in ours["version_aliases"].items() if f not in al2023 or f in sdk["versions"]}
    assert aliases == {a: f for a, f in sdk["version_aliases"].items() if f in ours["versions"]}


def test_the_amazon_linux_2023_images_through_2_13_have_their_own_repository_and_tags() -> None:
    assert official_image("us-east-1", "2.13", None, gpu=True) == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13-cu133-amzn2023-sagemaker"
    )
    assert official_image("eu-west-1", "2.11", None, gpu=True).endswith("/pytorch:2.11-cu130-amzn2023-sagemaker")
    assert official_image("eu-west-1", "2.12.1", None, gpu=False).endswith("/pytorch:2.12.1-cpu-amzn2023-sagemaker")
    assert official_image("af-south-1", "2.13", None, gpu=True).startswith("626614931356.dkr.ecr.af-south-1.")


def test_the_default_is_the_newest_version_aws_still_patches_and_smddp_the_newest_with_the_library() -> None:
    import datetime

    from cloudddp.backends.sagemaker.images import default_version

    assert default_version(False, datetime.date(2026, 11, 25))[0] == "2.13"
    assert default_version(False, datetime.date(2027, 7, 21))[0] == "2.13"  # none patched: the newest, said so
    version, why = default_version(True, datetime.date(2026, 11, 25))
    assert version == "2.5" and "out of AWS patch support since 2025-10-29" in why
    plan = SageMakerBackend().render(load_spec(ROOT / "jobs" / "cifar10-resnet18.yaml", ["sagemaker.image="]))
    default, _ = default_version(False)  # today's
    assert plan.request["AlgorithmSpecification"]["TrainingImage"] == official_image("us-east-1", default, None, True)
    assert any(f"PyTorch {default}: the newest official image" in d for d in plan.decisions), plan.decisions


def test_smddp_on_an_al2023_image_is_refused() -> None:
    result = cli(
        "render",
        str(SMDDP_JOB),
        "-b",
        "sagemaker",
        "-o",
        "sagemaker.image=763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13-cu133-amzn2023-sagemaker",
    )
    assert result.returncode == 2 and "has no SageMaker data-parallel library" in result.stderr, result.stderr


def test_the_project_names_no_image_out_of_patch_support_and_a_spec_that_does_is_warned() -> None:
    """init's template, jobs/ and the tutorial notebook name no image out of AWS patch support (such as
    pytorch-training:2.4-gpu-py311, out of it since 2025-07-24), and a spec that names one is warned."""
    from cloudddp.backends.sagemaker.images import support_warning

    named = re.compile(r"\d{12}\.dkr\.ecr\.[\w.-]+/[\w/-]+:[\w.-]+")
    places = [*sorted((ROOT / "jobs").glob("*.yaml")), ROOT / "examples" / "tutorial.ipynb"]
    places.append(ROOT / "cloudddp" / "spec" / "scaffold.py")
    stale = [(p.name, uri) for p in places for uri in named.findall(p.read_text()) if support_warning(uri)]
    assert not stale, stale
    job = ROOT / "jobs" / "cifar10-resnet18.yaml"
    plan = SageMakerBackend().render(load_spec(job))
    assert plan.request["AlgorithmSpecification"]["TrainingImage"].endswith(":2.13-cu133-amzn2023-sagemaker")
    assert not any("patch support" in w for w in plan.warnings), plan.warnings
    old = "sagemaker.image=763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-gpu-py311"
    warned = SageMakerBackend().render(load_spec(job, [old])).warnings
    assert any("PyTorch 2.4.0 is out of AWS patch support since 2025-07-24" in w for w in warned), warned
