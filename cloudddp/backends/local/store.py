"""``python -m cloudddp.backends.local.store PORT``: host a local run's rendezvous store on 127.0.0.1 until SIGTERM.

A module of its own (not ``rendezvous``, which the package imports), so ``-m`` runs it without a second copy.
"""

from __future__ import annotations

import signal
import sys

from cloudddp.backends.local.rendezvous import LOOPBACK, host_store


def main(argv: list[str]) -> int:
    store = host_store(int(argv[0]))
    print(f"rendezvous store on {LOOPBACK}:{store.port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    sys.exit(main(sys.argv[1:]))
