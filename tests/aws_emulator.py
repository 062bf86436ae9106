"""moto as a real HTTP server on 127.0.0.1, and a proxy in front of it that injects faults."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@dataclass
class FaultProxy:
    """Forwards to ``upstream``; ``rule(target, count)`` may answer instead: 'throttle', '503' or 'drop'
    (forward the request, then close the connection without a response: a lost response)."""

    upstream: str
    rule: Callable[[str, int], str | None] = lambda target, n: None
    seen: dict[str, int] = field(default_factory=dict)

    def target_of(self, handler: http.server.BaseHTTPRequestHandler, body: bytes) -> str:
        amz = handler.headers.get("X-Amz-Target", "")
        if amz:
            return amz.split(".")[-1]
        if b"Action=" in body:
            return body.split(b"Action=")[1].split(b"&")[0].decode()
        return f"{handler.command} {handler.path.split('?')[0]}"

    @contextmanager
    def running(self) -> Iterator[str]:
        proxy = self
        host, port = self.upstream.removeprefix("http://").split(":")

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = proxy.target_of(self, body)
                proxy.seen[target] = proxy.seen.get(target, 0) + 1
                fault = proxy.rule(target, proxy.seen[target])
                if fault == "throttle":
                    payload = b'{"__type":"ThrottlingException","message":"Rate exceeded"}'
                    self._reply(400, payload, {"Content-Type": "application/x-amz-json-1.1"})
                    return
                if fault == "503":
                    self._reply(503, b"<Error><Code>ServiceUnavailable</Code></Error>", {})
                    return
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._reply(resp.status, data, {k: v for k, v in resp.getheaders()
                                                if k.lower() not in ("transfer-encoding", "content-length", "connection")})

            def _reply(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _any

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
