"""The ``cloudddp`` command line: owns the ``cloudddp`` command, one module per command group (``cmd_spec``,
``cmd_submit``, ``cmd_sizes``, ``cmd_runs``, ``cmd_backends``), the options they share (``options``) and the group
in ``app`` that imports a command's module only when that command is used. May import everything below it
(``api``, ``runs``, ``backends``, ``catalog``, ``code``, ``observe``, ``spec``, ``plan``, ``paths``, ``errors``),
nothing else.
"""
