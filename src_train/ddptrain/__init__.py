"""The shared script's modules, one package (``train.py`` next to it is the entry every job names).

They import each other relatively (``from . import distributed``), so the only top-level names the script
puts on ``sys.path`` are ``train`` and ``ddptrain``: an installed package called ``distributed``, ``data`` or
``config`` is neither shadowed by these modules nor shadows them.

- ``user.py``: your model and data (the one file to edit); ``config.py``: the arguments;
- ``distributed.py``: the process group; ``data.py``, ``augment.py``: datasets and batched augmentation;
- ``loop.py``: an epoch of training and the sharded evaluation; ``checkpoint.py``, ``storage.py``: checkpoints;
- ``metrics.py``, ``mlflow_log.py``: metric lines, and MLflow when it is configured; ``models.py``: the networks.
"""
