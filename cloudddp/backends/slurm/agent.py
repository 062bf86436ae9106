"""The rendezvous store on Slurm, as ``python -c`` wrappers: under ``slurm.launch: torchrun`` node 0's agent
(:data:`AGENT`), under ``srun`` rank 0's task (:data:`STORE`) binds the store's socket itself and tells the others
where it is through a file in the run folder; no process computes a port or trusts one.

A port known before the job runs (one derived from the job id, ``15000 + job id * 10 + restart`` say) could be bound
in advance by anyone on the first node: node 0 would fail with EADDRINUSE while the other nodes connected to that
listener, sent it the rendezvous id and unpickled the state it answered. So node 0's agent binds a port the kernel
picks (port 0, every interface: the other nodes must reach it), or ``slurm.rendezvous_port`` where a site fixes one,
before any process can know which; torchrun's c10d store serves on that socket (``master_listen_fd``). Only then
does node 0 write ``host:port`` into the run folder, which only the submitting user may write (preflight checks the
working folder), and the other nodes' agents read it from there (a regular file of their own user that nobody else
may write: not a link, nor a FIFO, which is opened without waiting) and connect to nothing else. A site's fixed port
that is taken ends node 0 with :data:`PORT_TAKEN_EXIT` and the file saying :data:`TAKEN` (the others end at once),
read as an infrastructure failure: nothing connects to a listener it did not bind. Both run with the job's Python,
which may not have cloudddp; argv: the endpoint file, the rendezvous host, the port (0: any), then torchrun's own
arguments or the store's role.
"""

from __future__ import annotations

from cloudddp.backends.torchrun import EACH_ROUND_ANEW

PORT_TAKEN_EXIT = 98
"""Node 0's agent's exit code when ``slurm.rendezvous_port`` is taken on its node (EADDRINUSE's number)."""
PORT_TAKEN_MARK = "cloudddp: the rendezvous port"
TAKEN = "taken"
"""What the endpoint file says when the binding node found ``slurm.rendezvous_port`` taken: the others end too."""
ENDPOINT_WAIT = 600
"""Seconds the other nodes wait for node 0 to write the endpoint (torchrun's own join timeout)."""

_SHARED = f"""import os, socket, stat, sys, time
path, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
del sys.argv[1:4]
def bind(port):
    try:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=512)
        return socket.create_server(("", port), backlog=512)
    except OSError as exc:
        print(f"{PORT_TAKEN_MARK} {{port}} (slurm.rendezvous_port) is taken on this node: {{exc.strerror}}; "
              "cloudddp never joins a listener it did not bind", file=sys.stderr, flush=True)
        publish("{TAKEN}")
        sys.exit({PORT_TAKEN_EXIT})
def publish(endpoint):
    part = f"{{path}}.{{os.getpid()}}"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.write(fd, endpoint.encode())
    os.close(fd)
    os.replace(part, path)
def read():
    deadline = time.monotonic() + {ENDPOINT_WAIT}
    while time.monotonic() < deadline:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # NONBLOCK: a FIFO never hangs
        except FileNotFoundError:
            time.sleep(0.2)
            continue
        except OSError:  # ELOOP: a link
            fd = -1
        info = os.fstat(fd) if fd >= 0 else None
        if info is None or not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            sys.exit(f"cloudddp: {{path}} is not a file of this user that only it may write: not joining the "
                     "rendezvous it names")
        endpoint = os.read(fd, 4096).decode()
        os.close(fd)
        if endpoint == "{TAKEN}":
            sys.exit({PORT_TAKEN_EXIT})
        return endpoint
    sys.exit(f"cloudddp: node 0 did not say where the rendezvous is ({{path}}) within {ENDPOINT_WAIT} s")
"""
"""Both wrappers' start: their arguments, binding (a taken port ends the process with its reason), and the
endpoint file written by the node that binds and read, checked, by the others."""

AGENT = (
    _SHARED
    + EACH_ROUND_ANEW
    + """from datetime import timedelta
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as c10d
from torch.distributed.run import main
if os.environ["SLURM_NODEID"] == "0":
    sock = bind(port)
    port = sock.getsockname()[1]
    def hosted(params):
        timeout = timedelta(seconds=params.get_as_int("read_timeout", 60))
        return dist.TCPStore(host, port, is_master=True, multi_tenant=True, timeout=timeout,
                             master_listen_fd=sock.detach())
    c10d._create_tcp_store = hosted
    endpoint = f"{host}:{port}"
    publish(endpoint)
else:
    endpoint = read()
sys.argv[1:1] = ["--rdzv-endpoint", endpoint]
sys.exit(main())
"""
)
"""torchrun's wrapper (``python -c``); its workers' store is made anew for each attempt on a port the rank-0
agent binds (:data:`~cloudddp.backends.torchrun.EACH_ROUND_ANEW`)."""

STORE = (
    _SHARED
    + """if sys.argv[1] == "read":
    print(read(), flush=True)
    sys.exit()
watched = f"/proc/{sys.argv[2]}"
sock = bind(port)
port = sock.getsockname()[1]
try:
    import torch.distributed as dist
except ImportError as exc:
    sys.exit(f"cloudddp: {sys.executable} cannot host the rendezvous store ({exc}): slurm.python (or the "
             "job's requirements environment) must be a Python with torch, the one the training uses")
store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False, multi_tenant=True,
                      master_listen_fd=sock.detach())
endpoint = f"{host}:{port}"
publish(endpoint)
print(endpoint, flush=True)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
while os.path.exists(watched):
    time.sleep(1)
"""
)
"""``slurm.launch: srun``'s store (``python -c``), where each task is a training process and torch's own
``env://`` rendezvous would have rank 0 bind ``MASTER_PORT`` (known in advance, so squattable) as the program
starts. Rank 0's task runs it first, with ``serve <pid>``: it binds, hosts the store on that socket, writes the
endpoint into the run folder and prints it, then lives while ``<pid>`` (its task, which becomes the training
program) does. Every other task runs it with ``read``. The ranks then join as clients only
(``TORCHELASTIC_USE_AGENT_STORE=True``, as under torchrun's agent)."""
