"""EFA on SageMaker, as SageMaker's own training toolkit decides it, and the NCCL protocol it forces.

The toolkit (``sagemaker_training/__init__.py``) attaches the EFA NCCL settings (``FI_PROVIDER=efa``)
only on the instance types in ``SM_EFA_NCCL_INSTANCES`` (and EFA's device RDMA only on some of those, its
``SM_EFA_RDMA_INSTANCES``, which the toolkit sets by itself and cloudddp need not know): the list below is the
union of sagemaker-training 5.1.1 (what the AL2023 images pin) and 5.1.4 (the newest), read 2026-11-25. EC2's
own data gives EFA to more sizes (g5.12xlarge, g6.*, g6e.*): on SageMaker cloudddp follows SageMaker's list and
says so in the plan.

The toolkit also sets ``NCCL_PROTO=simple`` for every torchrun job, a workaround for EFA's out-of-order
delivery that aws-ofi-nccl 1.6 made unnecessary (the plugin then picks the protocol itself, and forcing
Simple costs bandwidth). The AL2023 images ship EFA installer 1.47 / 1.49 (2026, DLC changelog), whose
plugin is far newer than 1.6, so on them the launcher removes the toolkit's ``NCCL_PROTO`` (a spec that
sets it keeps its own). On older images the plugin version is not recorded here: the toolkit's value stays.
"""

from __future__ import annotations

import re

SM_EFA_NCCL_INSTANCES = frozenset(
    {
        "ml.g4dn.8xlarge",
        "ml.g4dn.12xlarge",
        "ml.g5.48xlarge",
        "ml.p3dn.24xlarge",
        "ml.p4d.24xlarge",
        "ml.p4de.24xlarge",
        "ml.p5.48xlarge",
        "ml.p5e.48xlarge",
        "ml.trn1.32xlarge",
        "ml.p6e-gb200.36xlarge",
    }
)
_AL2023_IMAGE = re.compile(r"/pytorch:\d+\.\d+(?:\.\d+)?-(?:cu\d+|cpu)-amzn2023")


def sagemaker_efa(instance_type: str) -> bool:
    return instance_type in SM_EFA_NCCL_INSTANCES


def plugin_picks_protocol(image: str) -> bool:
    """Whether the image's aws-ofi-nccl is known to be 1.6 or newer (the official AL2023 images)."""
    return bool(_AL2023_IMAGE.search(image))
