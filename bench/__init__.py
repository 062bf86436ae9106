"""cloudddp's benchmark suite: every speed claim measured side by side with what users would use instead.

``make bench`` runs every case at full size and writes ``bench/results/latest.json`` and
``bench/results/latest.md`` (also copied into docs/benchmarks.md between markers). ``make test`` runs each case
once at a tiny size (``--tiny``) to prove it works; the numbers that count come from ``make bench``.
"""
