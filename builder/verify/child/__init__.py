"""The untrusted side: code that runs only in a sandboxed child (entry points `main`, `build`). It imports nothing of
the parent's packages; the verdict relies on nothing here without a check in the parent (docs/architecture.md)."""
