"""The processes the builder starts by module name (`python -m MODULE`): the parent never imports the children's."""

from __future__ import annotations

CHILD_MODULE = "builder.verify.child.main"  # an evaluation, reference or baseline child (sandboxed)
BUILD_MODULE = "builder.verify.child.build"  # a compile child (sandboxed: a build runs the candidate's load-time code)
ZYGOTE_MODULE = "builder.verify.sandbox.zygote"  # imports torch once and forks evaluation children
ENGINE_PROCESS_MODULE = "builder.verify.engine.engine_process"  # one per GPU: run by the builder, no candidate code
