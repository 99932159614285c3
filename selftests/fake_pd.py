"""A tiny PD stand-in: recorded PD v8.5 answers over real HTTP (127.0.0.1 unless told).

PD cannot run here (no registry ships it), so the PD client is tested
against this server. It answers from ``selftests/data/pd/*.json``, can move
the leader (as a PD election would between ``tiup cluster display`` and the
run), can answer with an HTTP error, and counts requests per path.

``python -m selftests.fake_pd ADDRESS [PORT]`` serves the answers of a
one-PD cluster whose PD is ADDRESS:PORT (2379) on that address until it is
terminated: the PD of a namespace host (``selftests/test_tidb_live_netns.py``).
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "pd"


class FakePD:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.members: dict[str, Any] = json.loads((DATA / "members.json").read_text())
        self.pending: dict[str, Any] = json.loads((DATA / "pending_peer_none.json").read_text())
        self.error: tuple[int, str] | None = None
        self.hits: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control --
    def set_leader(self, name: str) -> None:
        """Make member ``name`` the leader (what a PD election does)."""
        with self._lock:
            for m in self.members["members"]:
                if m["name"] == name:
                    self.members["leader"] = copy.deepcopy(m)
                    self.members["etcd_leader"] = copy.deepcopy(m)
                    return
        raise KeyError(name)

    def single(self, address: str, port: int = 2379) -> FakePD:
        """Recorded PD v8.5 answer shapes, for a one-PD cluster whose PD is ``address:port``."""
        member = {"name": f"pd-{address}-{port}", "member_id": 12, "peer_urls": [f"http://{address}:{port + 1}"],
                  "client_urls": [f"http://{address}:{port}"], "deploy_path": f"/data/tidb-deploy/pd-{port}/bin",
                  "binary_version": "v8.5.3", "git_hash": "0" * 40}
        with self._lock:
            self.members = {"header": {"cluster_id": 1}, "members": [member], "leader": member,
                            "etcd_leader": member}
        return self

    def set_pending(self, recorded: str) -> None:
        with self._lock:
            self.pending = json.loads((DATA / recorded).read_text())

    def fail(self, status: int, body: str) -> None:
        with self._lock:
            self.error = (status, body)

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.server_address[1]
        return f"http://{self.host}:{port}"

    # -- serving --
    def answer(self, path: str) -> tuple[int, Any]:
        with self._lock:
            self.hits[path] = self.hits.get(path, 0) + 1
            if self.error is not None:
                return self.error
            if path == "/pd/api/v1/members":
                return 200, copy.deepcopy(self.members)
            if path == "/pd/api/v1/leader":
                return 200, copy.deepcopy(self.members["leader"])
            if path == "/pd/api/v1/regions/check/pending-peer":
                return 200, copy.deepcopy(self.pending)
        return 404, "404 page not found"

    def start(self) -> FakePD:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                status, body = fake.answer(self.path.split("?", 1)[0])
                data = (json.dumps(body, indent=2) if status == 200 else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        server = self._server
        self._thread = threading.Thread(target=lambda: server.serve_forever(poll_interval=0.05), name="fake-pd",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakePD:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> None:
    """Serve one PD at ``argv[0]``:``argv[1]`` (2379) until SIGTERM; prints its URL once it listens."""
    import signal
    import sys

    address, port = argv[0], int(argv[1]) if len(argv) > 1 else 2379
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with FakePD(address, port).single(address, port) as pd:
        print(pd.url, flush=True)
        sys.stdout.close()
        stop.wait()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
