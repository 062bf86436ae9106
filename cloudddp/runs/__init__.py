"""The life of a run, above every backend: submitting, one way for the CLI and the API
(:mod:`~cloudddp.runs.submit`: a named backend or ``-b auto``, then recovery), the runner
(:mod:`~cloudddp.runs.runner`: render + the question before a launch + preflight + launch + the budget watch, cost,
list), this machine's run database (:mod:`~cloudddp.runs.database`),
recovery chains and their watcher (:mod:`~cloudddp.runs.recovery`), a run as its person sees it, every attempt
of its chain as one (:mod:`~cloudddp.runs.chained`: status, cost, logs, metrics without repeats), the sizes a
recovery moves to (:mod:`~cloudddp.runs.fallback`), a run left queued and a first size refused at submission
(:mod:`~cloudddp.runs.queued`), ``-b auto``'s choice of a backend and the order of the others
(:mod:`~cloudddp.runs.placement`), the budget watch (:mod:`~cloudddp.runs.budget`), cost reports
(:mod:`~cloudddp.runs.cost`), what finished runs teach the next estimate (:mod:`~cloudddp.runs.steptimes`) and what
a run that resumed a checkpoint ends with (:mod:`~cloudddp.runs.resumed`: a checkpoint that does not fit the model,
a training with nothing left) and a running run's straggler in its status (:mod:`~cloudddp.runs.notes`).

May import: ``backends`` (the contract, the plugins and the checkpoint stores; no module here names one backend)
and everything below them. Inside, from the bottom: database, cost, steptimes, resumed, notes, fallback → runner
→ placement, queued → recovery → submit, chained, budget.
"""
