"""The verification engine, in layers that import one way (docs/architecture.md, "Layers and the trust boundary"):

- `protocol/`: what crosses the sandbox boundary; both sides import it;
- `child/`: the untrusted side, run only in sandboxed children started by module name;
- `sandbox/`, `compile/`, `judge/`, `engine/`: the trusted parent, which starts and watches the children, builds
  the candidates, makes the verdict and schedules the stream (`engine.verifier`: `Verifier`, `verify`).

This package imports nothing, so that a sandboxed child loads only the child side.
"""
