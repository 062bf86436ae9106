"""The backends: one package per place a job can run, mechanism only.

Shared by the backend packages (what a backend package may import of this wing; the import-linter contract "a
backend package imports only itself, the backends' shared modules and the layers below" in pyproject.toml lists
the same, and tests/project/test_layers.py holds the two equal):

- :mod:`~cloudddp.backends.base`: the contract: class attributes, the hooks a backend implements and the verbs
  over them, with their written semantics;
- its value types: :mod:`~cloudddp.backends.status` (states, causes, statuses, log lines),
  :mod:`~cloudddp.backends.checks` (preflight checks and missing settings), :mod:`~cloudddp.backends.records`
  (run records);
- :mod:`~cloudddp.backends.features`: what a backend cannot do, with the reason;
- :mod:`~cloudddp.backends.sized`: a backend whose sizes come from the catalog;
- :mod:`~cloudddp.backends.procs`: signalling only the processes cloudddp started (a pid with its start time and
  boot);
- :mod:`~cloudddp.backends.folderlock`: one training per checkpoint folder;
- :mod:`~cloudddp.backends.torchrun`: what the backends that run torchrun agents share (the restart setting,
  which rank failed);
- :mod:`~cloudddp.backends.checkpoints`: a training's checkpoint folder as a store, what it holds, and carrying it
  to another backend's store;
- :mod:`~cloudddp.backends.verdicts`: a hang's verdict (the culprit the hang doctor named in the job) read from any
  backend's log, and kept in the run's record once read;
- :mod:`~cloudddp.backends.commands`: what a command a backend adds to the command line (the ``cloudddp.commands``
  entry-point group) shares with cloudddp's own: the ``--override`` and ``--json`` options, reading the job spec.

The registry, which no backend package imports: :mod:`~cloudddp.backends.plugins` (the ``cloudddp.backends``
entry-point group, and the full spec model composed from the registered backends' sections) and
:mod:`~cloudddp.backends.installed` (the cached scan of the installed distributions' entry points).

The contract's own helper, which no backend package imports: :mod:`~cloudddp.backends.budget_notes` (what a
plan says of ``resources.max_cost``).

The built-in backend packages, each registered in the entry-point group and rendering in three steps
(``decide.py``, the build, ``explain.py``): :mod:`~cloudddp.backends.local`, :mod:`~cloudddp.backends.sagemaker`,
:mod:`~cloudddp.backends.azureml` and :mod:`~cloudddp.backends.slurm`; each one's docstring names its modules.

May import: the layers below (``runtime``, ``catalog``, ``code``, ``observe``, ``spec``, ``plan``, ``paths``,
``errors``, ``injob``). A backend package imports only its own modules, the shared modules above and those layers:
never ``runs``, ``api``, ``cli``, the registry or another backend package (import-linter's contracts, which read
the backend packages from the entry-point group).
"""
