"""The longest single string the container's training toolkit builds from a request, checked at render.

The toolkit (``sagemaker_training.environment.Environment.to_env_vars``) copies the hyperparameters, so the
launcher's whole payload, into the environment variables ``SM_HPS``, ``SM_USER_ARGS`` and ``SM_TRAINING_ENV``;
the last also holds the hosts (several times), the channels and the paths. Linux refuses to start a program when
one string of its environment or arguments is longer than ``MAX_ARG_STRLEN`` (32 pages: 131072 bytes,
``include/uapi/linux/binfmts.h``), so a payload above ~126 KB ends at container start with E2BIG, after the
instances were paid for. CreateTrainingJob's own limits (100 hyperparameters of 2,500 characters) allow twice that.

``SM_TRAINING_ENV`` is the hyperparameters' JSON plus a part that grows with the hosts and channels: measured with
sagemaker-training 5.1.4 at 1,053 bytes for 1 host, 17,899 for 512 hosts and 23,656 for 512 hosts and 20 channels
of 60-character names. :data:`RESERVE` bounds it from above (a test holds the bound against the installed toolkit).
"""

from __future__ import annotations

import json
from typing import Any

from cloudddp.errors import UserError

MAX_ARG_STRLEN = 32 * 4096
"""Linux's limit on one argument or environment string, its NUL included."""


def reserve(hosts: int, channels: int) -> int:
    """An upper bound of what ``SM_TRAINING_ENV`` holds besides the hyperparameters."""
    return 4096 + 40 * hosts + 400 * channels


def training_env_size(request: dict[str, Any]) -> int:
    """An upper bound of ``SM_TRAINING_ENV=<value>`` with its NUL, for ``request`` (the toolkit's JSON of the
    hyperparameters, each value decoded as it decodes them, and the rest)."""
    decoded = {key: _decoded(value) for key, value in request["HyperParameters"].items()}
    hosts = request["ResourceConfig"]["InstanceCount"]
    rest = reserve(hosts, len(request.get("InputDataConfig", [])))
    return len("SM_TRAINING_ENV=") + len(json.dumps(decoded).encode()) + rest + 1


def _decoded(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def check_argument_size(request: dict[str, Any]) -> None:
    """A UserError (exit 2) when the container's toolkit could not start the program for the request's size."""
    size = training_env_size(request)
    if size > MAX_ARG_STRLEN:
        raise UserError(
            f"HyperParameters: the launcher's payload (the program's arguments and environment) makes SageMaker's "
            f"training toolkit build an environment variable (SM_TRAINING_ENV) of about {size:,} bytes; Linux "
            f"starts no program with a string over {MAX_ARG_STRLEN:,} (MAX_ARG_STRLEN), so the container would fail "
            "with E2BIG before training",
            hint="shorten code.args and env: put long values in a file in code.dir or an input, and pass its path",
        )
