"""The job spec: the model (:mod:`~cloudddp.spec.model`: the job spec and the checks that span its sections) and the
sections it is made of (:mod:`~cloudddp.spec.sections`) and their kinds of value (durations, ``off``:
:mod:`~cloudddp.spec.values`), YAML loading with errors a person can act on and ``-o`` overrides
(:mod:`~cloudddp.spec.load`; how large a spec file may be, :mod:`~cloudddp.spec.size`), the placeholders that name a
job's shape and places (:mod:`~cloudddp.spec.placeholders`), secrets in the environment
(:mod:`~cloudddp.spec.secrets`), the user configuration that holds each backend's settings outside every job
(:mod:`~cloudddp.spec.userconfig`) and the starter files of ``cloudddp init`` (:mod:`~cloudddp.spec.scaffold`).

May import: ``plan``, ``paths`` and ``errors`` only. The spec does not know which backends exist: whoever
composes the full model passes the backends' sections in (:class:`~cloudddp.spec.model.Sections`;
:mod:`cloudddp.backends.plugins` does).
"""
