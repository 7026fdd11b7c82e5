"""A scripted HTTP server standing where a daemon would: for what a real
daemon never sends (HTML from a proxy, garbage, a stall), counting the
requests and connections it sees."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

# A handler gets (method name, request JSON) and returns (status,
# content type, body bytes), or None to close the connection unanswered.
Handler = Callable[[str, Any], "tuple[int, str, bytes] | None"]


def json_answer(doc: Any, status: int = 200) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(doc).encode()


class Fake:
    """Fake serves handler on a free loopback port until closed."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[tuple[str, Any]] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self.connections = 0
        # Close each connection after its answer without saying so, as a
        # daemon's idle timeout does to a kept-alive connection.
        self.drop_idle = False
        self.release = threading.Event()  # what a stalling handler waits on
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                fake.connections += 1
                super().setup()

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"null")
                method = self.path.rsplit("/", 1)[-1]
                fake.requests.append((method, body))
                fake.authorizations.append(self.headers.get("Authorization"))
                answer = fake.handler(method, body)
                if answer is None:
                    self.close_connection = True
                    return
                status, ctype, raw = answer
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                self.close_connection = fake.drop_idle

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class RawServer:
    """RawServer accepts TCP connections on a free loopback port and
    serves each on a thread of its own (serve, which a subclass gives),
    counting them; for what no HTTP server would send."""

    def __init__(self) -> None:
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.sock.close()
