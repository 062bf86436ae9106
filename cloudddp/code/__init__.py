"""The code a job runs: the content-addressed snapshot of ``code.dir`` (:mod:`~cloudddp.code.snapshot`: packing and
its cache), the ignore rules that say what it leaves out (:mod:`~cloudddp.code.ignore`), the walk of the folder into
the files it holds (:mod:`~cloudddp.code.scan`), what a plan says about it (:mod:`~cloudddp.code.shipped`), the
deterministic tar stream it is written with (:mod:`~cloudddp.code.tarstream`) and its gzip, deflated on every core
(:mod:`~cloudddp.code.blockgzip`), the per-file loops of the walk and
the stream in C (the extension ``_tarloop``, from ``_tarloop.c``: optional, built where a C compiler is found; the
Python loops are the reference and run without it), the stat cache that spares re-reading unchanged files
(:mod:`~cloudddp.code.filestate`) and the job's requirements (:mod:`~cloudddp.code.requirements`). The programs
shipped inside every snapshot are :mod:`cloudddp.injob`'s.

May import: ``observe``, ``spec``, ``paths``, ``errors`` and ``injob`` (the programs it ships).
"""
