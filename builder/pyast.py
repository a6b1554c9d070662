"""`ast.parse` safe to call from several threads.

CPython 3.11 and 3.12 can fail parses that run at the same time in two threads with "SystemError: AST
constructor recursion depth mismatch" (python/cpython#106905); the evaluation workers parse task and candidate
sources side by side, so every parse in the builder goes through one lock.
"""

from __future__ import annotations

import ast
import threading

_lock = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _lock:
        return ast.parse(source, filename=filename)
