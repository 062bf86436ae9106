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
- :mod:`~cloudddp.injob.hang`: the hang doctor in every rank (every rank's stacks taken when a collective times
  out, before any rank exits), with :mod:`~cloudddp.injob.culprit`, the judge (the rank the others wait for);
- :mod:`~cloudddp.injob.rank_stacks`: each rank of a job on one machine asked for its stacks (``cloudddp stacks``,
  run on each Slurm node as it is);
- :mod:`~cloudddp.injob.stack_requests`: one poller per host that answers a ``cloudddp stacks`` request where
  cloudddp cannot reach the machines (SageMaker's S3, Azure ML's MLflow run), with
  :mod:`~cloudddp.injob.stack_answers`, the client's half (not shipped: the request left, the answers read back
  from the run's log);
- :mod:`~cloudddp.injob.mpi_env`: the torch.distributed variables of a rank ``mpirun`` started;
- :mod:`~cloudddp.injob.interconnect`: the interconnect pre-flight (an all-reduce sweep's bus bandwidth, the transport
  NCCL picked, the job stopped when a size chosen for InfiniBand/EFA runs over sockets);
- :mod:`~cloudddp.injob.pace`: the straggler watch (each rank's own work per step; the rank the others wait for);
- :mod:`~cloudddp.injob.stop_hooks`: what an unchanged script's process gets so a stop saves and a resubmit
  resumes (DataLoader workers spared), with :mod:`~cloudddp.injob.lightning_stop` and
  :mod:`~cloudddp.injob.transformers_stop` for the frameworks.

May import: nothing of cloudddp.
"""
