"""A TCP proxy in front of a real daemon, for gray faults: stall (accept
and keep connections, forward nothing), delay (each answer chunk held
back), and restore. Counts the connections it accepted and the requests sent
through it (each HTTP request line, whether the daemon answers or not)."""

from __future__ import annotations

import re
import socket
import threading
from collections import Counter


_REQUEST = re.compile(rb"POST /\S*?([A-Za-z]+) HTTP/")


class Proxy:
    """Proxy forwards 127.0.0.1:<port> to target ("host:port")."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.connections = 0
        self.requests = 0  # HTTP requests forwarded toward the daemon
        self.methods: Counter[str] = Counter()  # the same, by the path's last part (Allow, Record...)
        self.delay = 0.0  # seconds each chunk from the daemon is held back
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        """stall keeps every connection (new ones too) and forwards nothing."""
        self._flowing.clear()

    def restore(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self.sock.close()
        with self._lock:
            for s in self._socks:
                try:
                    s.close()
                except OSError:
                    pass

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                down, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(down,), daemon=True).start()

    def _serve(self, down: socket.socket) -> None:
        self._flowing.wait()
        if self._closed.is_set():
            down.close()
            return
        try:
            up = socket.create_connection(self.target)
        except OSError:
            down.close()
            return
        with self._lock:
            self._socks += [down, up]
        threading.Thread(target=self._pump, args=(down, up, False), daemon=True).start()
        self._pump(up, down, True)

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                if not answers:
                    with self._lock:
                        for m in _REQUEST.finditer(data):
                            self.requests += 1
                            self.methods[m.group(1).decode()] += 1
                if answers and self.delay:
                    self._closed.wait(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
