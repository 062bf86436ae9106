"""The code a job runs: the content-addressed snapshot of ``code.dir`` (:mod:`~cloudddp.code.snapshot`: packing and
its cache), the ignore rules that say what it leaves out (:mod:`~cloudddp.code.ignore`), the walk of the folder into
the files it holds (:mod:`~cloudddp.code.scan`), what a plan says about it (:mod:`~cloudddp.code.shipped`), the
deterministic tar stream it is written with (:mod:`~cloudddp.code.tarstream`), the stat cache that spares
re-reading unchanged files (:mod:`~cloudddp.code.filestate`), the job's requirements
(:mod:`~cloudddp.code.requirements`), and the in-job launcher and the keeper of a script's own files
(``checkpoint.files``) shipped inside every snapshot (:mod:`~cloudddp.injob.shim`, :mod:`~cloudddp.injob.keepfiles`;
they import nothing of cloudddp: they run in stock cloud images).

May import: ``observe``, ``spec``, ``paths`` and ``errors``.
"""
