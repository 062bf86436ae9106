"""Under ``slurm.launch: srun``, rank 0's task hosts the store on a socket it binds itself (no port from the
job id), publishes where in a 0600 file, and lives exactly as long as its task; a site's fixed port that is taken
ends it with the file saying so, and the readers end too instead of joining anything. The wrapper is run here
as the batch script runs it (``python -c``), with torch's real TCPStore as the ranks' client."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from cloudddp.backends.slurm.agent import PORT_TAKEN_EXIT, STORE, TAKEN

pytestmark = pytest.mark.slow  # each wrapper imports torch


def wrapper(endpoint: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", STORE, str(endpoint), *args]


def test_rank_0_binds_publishes_serves_and_ends_with_its_task(tmp_path: Path) -> None:
    endpoint = tmp_path / ".cloudddp-rendezvous"
    task = subprocess.Popen(["sleep", "300"])  # stands in for rank 0's task, which becomes the training
    serve = subprocess.Popen(wrapper(endpoint, "127.0.0.1", "0", "serve", str(task.pid)), stdout=subprocess.PIPE)
    try:
        assert serve.stdout is not None
        printed = serve.stdout.readline().decode().strip()
        host, port = printed.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0 and endpoint.read_text() == printed
        info = endpoint.lstat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        read = subprocess.run(wrapper(endpoint, "", "0", "read"), capture_output=True, text=True, check=True)
        assert read.stdout.strip() == printed
        client = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=10))
        client.set("rank1", "here")
        assert client.get("rank1") == b"here"  # a working store, the one the ranks join as clients
        assert serve.poll() is None
    finally:
        task.kill()
        task.wait()
    assert serve.wait(timeout=10) == 0  # its task gone, the store ends: nothing outlives the step


def test_a_taken_fixed_port_ends_the_store_and_its_readers_without_joining(tmp_path: Path) -> None:
    endpoint = tmp_path / ".cloudddp-rendezvous"
    squatter = socket.create_server(("", 0))
    port = squatter.getsockname()[1]
    squatter.setblocking(False)
    try:
        serve = subprocess.run(
            wrapper(endpoint, "127.0.0.1", str(port), "serve", str(os.getpid())), capture_output=True, text=True
        )
        assert serve.returncode == PORT_TAKEN_EXIT and serve.stdout == ""
        assert f"the rendezvous port {port} (slurm.rendezvous_port) is taken" in serve.stderr
        assert endpoint.read_text() == TAKEN
        read = subprocess.run(wrapper(endpoint, "", "0", "read"), capture_output=True, text=True)
        assert read.returncode == PORT_TAKEN_EXIT and read.stdout == ""
        with pytest.raises(BlockingIOError):
            squatter.accept()  # nobody connected to the listener that held the port
    finally:
        squatter.close()


def test_a_reader_refuses_an_endpoint_file_that_is_a_link(tmp_path: Path) -> None:
    planted = tmp_path / "planted"
    planted.write_text("127.0.0.1:1")
    endpoint = tmp_path / ".cloudddp-rendezvous"
    endpoint.symlink_to(planted)
    started = time.monotonic()
    read = subprocess.run(wrapper(endpoint, "", "0", "read"), capture_output=True, text=True, timeout=60)
    assert read.returncode == 1 and read.stdout == "" and time.monotonic() - started < 60
    assert "is not a file of this user that only it may write: not joining the rendezvous" in read.stderr
