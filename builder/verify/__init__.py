"""The verification engine: trusted parent (engine, sandbox, compile, batching, pool, verdict, static_scan,
extension_symbols) and the untrusted child (child, checks, timing, baselines). See docs/architecture.md.

Imports are lazy so that `python -m builder.verify.child.main` in a sandbox pulls in only the child side.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "VerifyOptions": "builder.verify.options",
    "Verifier": "builder.verify.engine.verifier",
    "compile_candidate": "builder.verify.engine.verifier",
    "evaluate_compiled": "builder.verify.engine.verifier",
    "verify": "builder.verify.engine.verifier",
    "CompileResult": "builder.verify.compile.extension",
    "ChildOutcome": "builder.verify.sandbox.process",
    "run_sandboxed": "builder.verify.sandbox.process",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'builder.verify' has no attribute {name!r}")
