"""What stops a launch on every built-in backend before the backend's own launch runs: nothing is created,
uploaded or started (the backend's ``_launch`` is stubbed to record that it was reached)."""

from __future__ import annotations

from typing import Any

import pytest

from cloudddp.backends.plugins import backend_class, load_spec, names
from cloudddp.errors import UserError
from tests.support.cli import ROOT

JOB_OF = {"local": "digits-local", "sagemaker": "cifar10-smddp", "azureml": "cifar10-azureml", "slurm": "cifar10-slurm"}
REFUSED = {
    "missing variable": (
        ["env.API_TOKEN.from_env=CLOUDDDP_TEST_UNSET_4C1E", "env.API_TOKEN.secret=true"],
        r"env\.API_TOKEN reads \$CLOUDDDP_TEST_UNSET_4C1E, which is not set in this shell",
    ),
    "short secret": (
        ["env.API_TOKEN.from_env=CLOUDDDP_TEST_SHORT_4C1E", "env.API_TOKEN.secret=true"],
        r"env\.API_TOKEN: the secret's value has fewer than 8 characters",
    ),
}
"""A literal secret under 8 characters is refused when the spec loads; one read from the shell only at launch."""


def test_every_built_in_backend_is_checked() -> None:
    assert {n for n in names() if backend_class(n).__module__.startswith("cloudddp.")} == set(JOB_OF)


@pytest.mark.parametrize("case", sorted(REFUSED))
@pytest.mark.parametrize("backend", sorted(JOB_OF))
def test_a_missing_variable_or_a_short_secret_stops_the_launch_before_anything_is_made(
    backend: str, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLOUDDDP_TEST_UNSET_4C1E", raising=False)
    monkeypatch.setenv("CLOUDDDP_TEST_SHORT_4C1E", "short")
    overrides, message = REFUSED[case]
    instance = backend_class(backend)()
    plan = instance.render(load_spec(ROOT / "jobs" / f"{JOB_OF[backend]}.yaml", overrides))
    reached: list[Any] = []
    monkeypatch.setattr(instance, "_launch", lambda *a, **kw: reached.append(a))
    with pytest.raises(UserError, match=message):
        instance.launch(plan, checks=False)
    assert reached == []
