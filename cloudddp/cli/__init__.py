"""The ``cloudddp`` command line: owns the ``cloudddp`` command, one module per command group (``cmd_spec``,
``cmd_submit``, ``cmd_sizes``, ``cmd_runs``, ``cmd_stacks``, ``cmd_backends``, ``cmd_check``, ``cmd_config``,
``cmd_storage``), what they share (``options``: options, reading a spec, printing; ``confirm``: the cost said before
a cloud launch; ``placing``: ``submit -b auto``'s ranking) and the group in ``app`` that imports a command's module
only when that command is used. May import everything below it (``api`` and every layer under it).
"""
