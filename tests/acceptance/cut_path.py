"""A TCP path to a server that a test can cut: a small proxy on 127.0.0.1.

A producer reaches the broker through it while the workers connect directly, so cutting it
fails the producer's publishes (the broker path of one process, not the broker itself; the
shared Redis is never touched). ``cut()`` drops every connection through it and refuses
new ones.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable

#: Ports this test suite's proxies may listen on (private to this worktree's tests).
PORTS = range(6400, 6410)


class CutPath:
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` until :meth:`cut`."""

    def __init__(self, upstream: tuple[str, int], ports: Iterable[int] = PORTS) -> None:
        self.upstream = upstream
        self._listener = _listen(ports)
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def cut(self) -> None:
        """Drop every connection through the path and refuse new ones."""
        self._cut.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.cut()
        for thread in self._threads:
            thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._cut.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            server.settimeout(None)
            with self._lock:
                if self._cut.is_set():
                    client.close()
                    server.close()
                    return
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                thread = threading.Thread(target=_pump, args=(source, sink), daemon=True)
                thread.start()
                self._threads.append(thread)


def _listen(ports: Iterable[int]) -> socket.socket:
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        sock.listen(16)
        sock.settimeout(0.1)
        return sock
    raise RuntimeError(f"no free port for a proxy in {ports}")


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
