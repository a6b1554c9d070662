"""Fixtures of the generation tests: a tiny task suite and a loopback OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.tasks import Task, load_suite

from .helpers import ELEMENTWISE_TASK, MODULE_ONLY_TASK, LoopbackServer


@pytest.fixture(scope="session")
def tiny_suite_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("suite")
    level1 = root / "level1"
    level1.mkdir()
    (level1 / "1_relu.py").write_text(ELEMENTWISE_TASK.format(doc="ReLU.", expr="torch.relu(x)"))
    (level1 / "2_leaky_relu.py").write_text(
        ELEMENTWISE_TASK.format(doc="Leaky ReLU.", expr="torch.nn.functional.leaky_relu(x, 0.1)")
    )
    (level1 / "3_linear_tanh.py").write_text(MODULE_ONLY_TASK)
    return root


@pytest.fixture(scope="session")
def tiny_tasks(tiny_suite_dir) -> dict[str, Task]:
    return {t.id: t for t in load_suite(tiny_suite_dir).tasks}


@pytest.fixture
def loopback():
    servers: list[LoopbackServer] = []

    def start(script) -> LoopbackServer:
        server = LoopbackServer(script)
        server.thread.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.httpd.shutdown()
        server.httpd.server_close()
