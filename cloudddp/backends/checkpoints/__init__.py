"""A training's checkpoint folder, wherever a backend keeps it: the store every backend opens it as
(:mod:`~cloudddp.backends.checkpoints.store`), what a folder on this machine holds and what a plan may say a
resubmit resumes from (:mod:`~cloudddp.backends.checkpoints.contents`), and the verified copy of the latest
checkpoint from one backend's store to another's when a run moves (:mod:`~cloudddp.backends.checkpoints.carry`).

May import: ``cloudddp.backends.base``, ``cloudddp.injob``, ``cloudddp.spec`` and ``cloudddp.errors``.
"""
