"""The rigs run many nodes on this machine's few cores at once; real nodes each have their own.

Every rig puts its nodes and hosts (local torchrun nodes, the Slurm cluster's two nodes, SageMaker's hosts, Azure
ML's nodes) on this machine's CPUs, several tests at a time, where each real node has its cores to itself. A
process alone on its node is right to use every core it sees (torch does by default; the shared script sizes its
threads from its affinity), but here its threads share the cores with a dozen others. OpenMP's default wait then
spins a thread that waits for one that is descheduled, and the spinning is the process's CPU time: a 3-epoch
digits run of the shared script with 2 threads used 21 s of CPU on a machine running two suites, 4.5 s with
``OMP_WAIT_POLICY=PASSIVE`` (the waiting thread sleeps), as much as with one thread. On an idle machine the two
are equal. So the tests give every process they start the passive wait: the CPU goes to the work the test proves.
"""

from __future__ import annotations

SHARED_CORES_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
"""What every process a test starts gets in its environment (``tests/conftest.py`` sets it for the session; the
SageMaker rig, whose containers do not inherit this environment, puts it into each host's)."""
