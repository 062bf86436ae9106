"""Linux namespaces that stand in for SageMaker's container runtime in tests (root only).

SageMaker runs each instance of a training job as a container named ``algo-1``, ``algo-2``, ...: its
own hostname, an ``/etc/hosts`` naming every host, its own ``/opt/ml``, and a network the job's hosts
share. A rehearsal gives each host the same on this machine without changing anything outside the
test's sandbox:

- one network namespace per job (:func:`job_network`): the hosts reach each other on loopback
  addresses, and the toolkit's fixed ports (torchrun's 7777 across hosts, 29500 on one) cannot collide
  with anything else running on this machine;
- one mount + UTS + PID namespace per host (:func:`host_argv`): the sandbox's hosts file bound over
  ``/etc/hosts``, the host's sandbox folder bound over ``/opt/ml`` (the request names absolute
  ``/opt/ml/...`` paths such as ``CheckpointConfig.LocalPath``), and the hostname set. ``unshare
  --mount`` makes mount propagation private, so the mounts never reach the machine and vanish with
  the host's last process.

The job's network reaches the AWS emulator (moto on this machine's 127.0.0.1) through a bridge: a
listener on the same 127.0.0.1 port inside the job's network forwards over a Unix socket in the
sandbox (file-system sockets cross network namespaces) to a thread here that connects to moto, so an
endpoint URL means the same inside and outside.

The in-namespace halves run this file as a script (standard library only):
``namespaces.py bridge SOCKET PORT`` (or ``isolated``: no bridge) and ``namespaces.py host CONFIG.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_UNIX_PATH_MAX = 107


def unavailable() -> str | None:
    """Why this machine cannot give a rehearsal its namespaces, or None when it can."""
    if os.geteuid() != 0:
        return "needs root: private mount, UTS and network namespaces (unshare) stand in for the containers"
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux)"
    probe = subprocess.run(
        ["unshare", "--mount", "--uts", "--net", "true"], check=False, capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"unshare --mount --uts --net is refused here: {probe.stderr.strip()}"
    return None


# -- byte pumps ------------------------------------------------------------------------------------
def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(1 << 16):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _splice(a: socket.socket, b: socket.socket) -> None:
    back = threading.Thread(target=_pipe, args=(b, a), daemon=True)
    back.start()
    _pipe(a, b)
    back.join()
    a.close()
    b.close()


def _serve(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    """Accept until the listener closes; splice each connection to a fresh one from ``connect``."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = connect()
        except OSError:
            client.close()
            continue
        threading.Thread(target=_splice, args=(client, upstream), daemon=True).start()


# -- the job's network -----------------------------------------------------------------------------
@contextlib.contextmanager
def job_network(sandbox: Path, port: int | None) -> Iterator[int]:
    """A network namespace for one job in which 127.0.0.1:``port`` reaches 127.0.0.1:``port`` here
    (``port`` None: no way out, as under SageMaker's network isolation).

    Yields the pid of the process that holds the namespace (and runs the bridge); hosts join it with
    :func:`host_argv`. The namespace ends when that process is stopped on exit.
    """
    sock_path = sandbox / "aws-bridge.sock"
    if len(str(sock_path)) > _UNIX_PATH_MAX:
        raise RuntimeError(f"sandbox path too long for a Unix socket: {sock_path}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if port is not None:
        listener.bind(str(sock_path))
        listener.listen(64)
        threading.Thread(
            target=_serve, args=(listener, lambda: socket.create_connection(("127.0.0.1", port))), daemon=True
        ).start()
    errors = sandbox / "aws-bridge.err"
    role = ["bridge", str(sock_path), str(port)] if port is not None else ["isolated"]
    with errors.open("w") as err:
        keeper = subprocess.Popen(
            ["unshare", "--net", sys.executable, __file__, *role],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
    try:
        assert keeper.stdout is not None
        if keeper.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the job network did not start: {errors.read_text()[-2000:]}")
        yield keeper.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()
        listener.close()
        sock_path.unlink(missing_ok=True)


def _loopback_up() -> None:
    """``ip link set lo up`` without iproute2: a new network namespace starts with lo down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def _unix_connection(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def _bridge(sock_path: str, port: int) -> None:
    _loopback_up()
    listener = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    _serve(listener, lambda: _unix_connection(sock_path))


def _isolated() -> None:
    _loopback_up()
    print("ready", flush=True)
    threading.Event().wait()


# -- one host --------------------------------------------------------------------------------------
def host_argv(network_pid: int, config: Path) -> list[str]:
    """The command that starts one host: join the job's network, then private mount, UTS and PID namespaces.

    The container's entry point is PID 1 of its PID namespace: when it exits, or when the ``unshare``
    process (the command's pid) is killed, every process of the host ends with it, including torchrun's
    workers, which torchrun starts in sessions of their own.

    ``config`` is a JSON file: ``hostname``, ``etc_hosts`` (file), ``opt_ml`` (folder), ``scratch``
    (an empty folder for the /opt view), ``cwd``, ``argv`` and ``env`` of the container's entry point.
    """
    return [
        "nsenter",
        f"--net=/proc/{network_pid}/ns/net",
        "--",
        "unshare",
        "--mount",
        "--uts",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--",
        sys.executable,
        __file__,
        "host",
        str(config),
    ]


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _mount_opt_ml(opt_ml: Path, scratch: Path) -> None:
    """Bind ``opt_ml`` at /opt/ml. Without an /opt/ml mount point on this machine, /opt is replaced (in
    this namespace only) by a tmpfs holding binds of every /opt entry plus an ``ml`` folder."""
    target = Path("/opt/ml")
    if not target.is_dir():
        opt = Path("/opt")
        if not opt.is_dir():
            raise SystemExit("rehearsal host: this machine has no /opt to place /opt/ml in")
        _mount("-t", "tmpfs", "tmpfs", str(scratch))
        for entry in opt.iterdir():
            placeholder = scratch / entry.name
            if entry.is_symlink():
                placeholder.symlink_to(os.readlink(entry))
                continue
            if entry.is_dir():
                placeholder.mkdir()
            else:
                placeholder.touch()
            _mount("--rbind", str(entry), str(placeholder))
        (scratch / "ml").mkdir()
        _mount("--rbind", str(scratch), str(opt))
    _mount("--bind", str(opt_ml), str(target))


def _host(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    _mount("--bind", config["etc_hosts"], "/etc/hosts")
    _mount_opt_ml(Path(config["opt_ml"]), Path(config["scratch"]))
    socket.sethostname(config["hostname"])
    os.chdir(config["cwd"])
    os.execvpe(config["argv"][0], config["argv"], config["env"])  # found on the container's PATH


if __name__ == "__main__":
    if sys.argv[1:2] == ["bridge"]:
        _bridge(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["isolated"]:
        _isolated()
    elif sys.argv[1:2] == ["host"]:
        _host(sys.argv[2])
    else:
        raise SystemExit("usage: namespaces.py bridge SOCKET PORT | isolated | host CONFIG.json")
