"""Seeing a run: metric lines and their parsing (:mod:`~cloudddp.observe.metrics`), following files
(:mod:`~cloudddp.observe.tail`), terminal output and progress (:mod:`~cloudddp.observe.console`), the live
metrics table (:mod:`~cloudddp.observe.live`), plots (:mod:`~cloudddp.observe.plotting`), the notebook widget
(:mod:`~cloudddp.observe.notebook`, which takes any object shaped like a run), the clouds' SDK messages kept off
the terminal (:mod:`~cloudddp.observe.sdklog`) and quantities as a person reads them (:mod:`~cloudddp.observe.units`).

May import: ``errors`` only (and rich, matplotlib, IPython lazily): everything above uses it, it uses nothing
of theirs.
"""
