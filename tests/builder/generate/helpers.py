"""Helpers of the generation tests: a fake verifier's records and a loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from builder.candidates import Candidate
from builder.tasks import Task
from schemas import KernelRecord

ELEMENTWISE_TASK = '''"""{doc}"""
import torch
import torch.nn as nn

OP_CATEGORY = "activation"
DTYPE = "float32"
N = 64


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return {expr}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
'''

MODULE_ONLY_TASK = '''"""Linear + tanh, module form only (KernelBench style)."""
import torch
import torch.nn as nn

batch = 8
features = 16


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.tanh(self.linear(x))


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
'''


# What a good LLM answer to the functional-form prompt for MODULE_ONLY_TASK looks like.
FUNCTIONAL_LINEAR_TANH = """import torch
import torch.nn as nn
import torch.nn.functional as F

batch = 8
features = 16


def module_fn(x, weight, bias):
    return torch.tanh(F.linear(x, weight, bias))


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        linear = nn.Linear(features, features)
        self.weight = nn.Parameter(linear.weight.detach().clone())
        self.bias = nn.Parameter(linear.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
"""


def make_record(candidate: Candidate, task: Task, status: str, backend: str = "cpu", **fields) -> KernelRecord:
    """A record as the verifier would return it (fields beyond the verdict optional)."""
    flags = fields.pop("flags", [])
    return KernelRecord(
        task_id=task.id,
        level=task.level,
        task_number=task.number,
        op_name=task.name,
        op_category=task.op_category,
        backend=backend,
        status=status,
        flags=flags,
        ranking_eligible=status == "correct" and not flags,
        **candidate.provenance_fields(),
        **fields,
    )


class LoopbackServer:
    """An OpenAI-compatible /v1/chat/completions endpoint answering from a script.

    `script(request_json, call_index)` returns (HTTP status, body dict) — or a string, shorthand for a
    200 completion with that content. Every request is recorded with its headers.
    """

    def __init__(self, script: Callable[[dict, int], object]) -> None:
        self.script = script
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    index = len(server.requests)
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                answer = server.script(body, index)
                status, payload = (200, completion(answer)) if isinstance(answer, str) else answer
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def user_prompts(self) -> list[str]:
        return [next(m["content"] for m in r["messages"] if m["role"] == "user") for r in self.requests]


def completion(text: str, prompt_tokens: int = 100, completion_tokens: int = 50) -> dict:
    return {
        "id": "cmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def verify_engine():
    """The real verification engine (an import error fails the test: the project is broken)."""
    import builder.verify.engine.verifier as engine

    return engine
