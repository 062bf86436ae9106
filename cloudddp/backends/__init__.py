"""The backends: one package per place a job can run, mechanism only.

Owns :mod:`~cloudddp.backends.base` (the contract: class attributes, the hooks a backend implements and the verbs
over them, with their written semantics), its value types (:mod:`~cloudddp.backends.status`: states, causes,
statuses, log lines; :mod:`~cloudddp.backends.checks`: preflight checks and missing settings;
:mod:`~cloudddp.backends.records`: run records), :mod:`~cloudddp.backends.sized` (a backend whose sizes come from
the catalog), :mod:`~cloudddp.backends.features` (what a backend cannot do, with
the reason), :mod:`~cloudddp.backends.plugins` (the ``cloudddp.backends`` entry-point group, and the full spec
model composed from the registered backends' sections), :mod:`~cloudddp.backends.procs` (signalling only the
processes cloudddp started: a pid with its start time and boot), :mod:`~cloudddp.backends.folderlock` (one
training per checkpoint folder), :mod:`~cloudddp.backends.torchrun` (what the backends that run torchrun
agents share: the restart setting, which rank failed) and one subpackage per built-in backend, each rendering in
three steps (``decide.py``, the build, ``explain.py``).

May import: the runtime contract, ``code``, ``catalog``, ``observe``, ``spec``, ``plan``, ``paths`` and
``errors``. Never ``runs`` (the policies above), the faces, or another backend: a backend package imports only
the shared modules here and its own.
"""
