"""The programs that run inside the job, shipped in every code snapshot under ``_cloudddp_*.py`` names and run in
stock images where cloudddp is not installed: so they import nothing of cloudddp (an import-linter contract) and
nothing but the standard library.

- :mod:`~cloudddp.injob.shim`: each rank's launcher (``_cloudddp_launch.py``): the stop a rank hears, the kept
  files, the requirements, the framework logs, the stall watchdog;
- :mod:`~cloudddp.injob.container_init` and :mod:`~cloudddp.injob.container_start`: a SageMaker container's entry
  (``_cloudddp_init.py``) and cloudddp's own start where the image has none (``_cloudddp_start.py``);
- :mod:`~cloudddp.injob.keepfiles`: the keeper of a script's own files (``checkpoint.files``);
- :mod:`~cloudddp.injob.resume_arg`: the newest kept checkpoint for a script's own resume flag
  (``{{last_checkpoint:PATTERN}}`` in its arguments, expanded as each rank starts);
- :mod:`~cloudddp.injob.framework_logs`: the metric records a framework's own logs hold (TensorBoard, Lightning's
  CSV, Trainer's state);
- :mod:`~cloudddp.injob.output_lines`: the line discipline of a rank's output;
- :mod:`~cloudddp.injob.preload`: modules the script's process imports before the script runs;
- :mod:`~cloudddp.injob.stall`: the stall watchdog's rule;
- :mod:`~cloudddp.injob.stop_hooks`: what an unchanged script's process gets so a stop saves and a resubmit
  resumes (DataLoader workers spared), with :mod:`~cloudddp.injob.lightning_stop` and
  :mod:`~cloudddp.injob.transformers_stop` for the frameworks.

May import: nothing of cloudddp.
"""
