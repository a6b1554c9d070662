"""Trusted parent: scheduling. `verifier.Verifier.stream` wires the stages of `stages.py` to the devices (engine
processes on several GPUs); `one_kernel.py` takes one kernel from source to record."""
