"""A loopback HTTP server speaking the few Hub endpoints `publish` uses (huggingface_hub 2.x):

POST /api/repos/create, POST /api/validate-yaml, POST /api/datasets/{repo}/preupload/{rev} (answers
"regular" for every file, so contents travel inline in the commit), POST /api/datasets/{repo}/commit/{rev}
(NDJSON: header line, then one line per file with base64 content). Anything else is recorded and answered
404 so a test sees unexpected calls. `fail_commits` makes the commit endpoint refuse (403).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeHub:
    def __init__(self, fail_commits: bool = False):
        self.requests: list[dict] = []
        self.created: list[dict] = []
        self.files: dict[str, bytes] = {}
        self.fail_commits = fail_commits
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                hub.requests.append(
                    {"method": "POST", "path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                hub.answer(self, body)

            def do_GET(self):
                hub.requests.append(
                    {"method": "GET", "path": self.path, "auth": self.headers.get("Authorization"), "body": b""}
                )
                self._send(404, {"error": "not found"})

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.Handler = Handler
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, handler, body: bytes) -> None:
        path = handler.path.split("?")[0]
        if path == "/api/repos/create":
            data = json.loads(body)
            self.created.append(data)
            handler._send(
                200, {"url": f"{self.endpoint}/datasets/{data['organization']}/{data['name']}", "name": data["name"]}
            )
        elif path == "/api/validate-yaml":
            handler._send(200, {"errors": [], "warnings": []})
        elif m := re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/preupload/([^/]+)", path):
            files = json.loads(body)["files"]
            handler._send(
                200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
            )
        elif m := re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/commit/([^/]+)", path):
            if self.fail_commits:
                # 403 (not 5xx, which the client retries with backoff): the token may not write this repo.
                handler._send(403, {"error": "You don't have the rights to push to this repository"})
                return
            for line in body.decode().splitlines():
                item = json.loads(line)
                if item.get("key") == "file":
                    value = item["value"]
                    self.files[value["path"]] = base64.b64decode(value["content"])
            handler._send(
                200,
                {
                    "commitUrl": f"{self.endpoint}/datasets/{m.group(1)}/commit/{'a' * 40}",
                    "commitOid": "a" * 40,
                    "success": True,
                },
            )
        else:
            handler._send(404, {"error": f"fake hub does not speak {path}"})

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
