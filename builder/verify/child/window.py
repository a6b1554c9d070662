"""The candidate's side of a refereed timing window (untrusted child).

The parent's referee (`referee.py`) says what to run; this process runs it and answers (`protocol/window.py`):
in-window warm-up pairs, then half-blocks of the candidate's or PyTorch eager's calls on fresh inputs from the
parent's seeds, each answered with every call's time and output digest; then the full outputs of the calls the
parent picks after the half-block ended (copied to the host there, and written to files once the device is given
back, or at once where they are large). Nothing said here is believed on its own: the parent checks the times
against its own clock and the revealed outputs against the digests and the clean reference.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from builder import config
from builder.verify.child.timing import LazyOutput, TimingMismatch, TimingSets
from builder.verify.protocol.window import LinkClosed


def serve_window(link: Any, sets: TimingSets, reveal_dir: str | Path, between: Any = None) -> None:
    """Answer the referee until it says "end" (or the link closes). A failing call ends the window with a
    {"failed"} message naming the kind of failure. `between` runs after each answer (the verifier's guard)."""
    import torch

    from builder.verify.child.failures import exception_text
    from builder.verify.protocol import tensor_files

    kept: dict[int, Any] = {}  # sampled call -> its output packed on the host, until the parent asks for it
    with torch.no_grad():
        while True:
            try:
                message = link.receive()
            except LinkClosed:
                return
            try:
                if "warm" in message:
                    link.send(_warm(sets, int(message["warm"])))
                elif "go" in message:
                    timer = sets.candidate if message.get("kind") == "candidate" else sets.eager
                    timer.held.clear()
                    spin_ms = float(message.get("spin_ms") or 0.0)
                    calls = [timer.time_fresh(int(m), int(seed), spin_ms) for m, seed in message["calls"]]
                    link.send({"done": message["go"], "calls": calls})
                elif "keep" in message:  # copied to the host while the device is ours, written at "reveal"
                    keep = [int(m) for m in message["keep"]]
                    for m in keep:
                        kept[m] = tensor_files.pack({f"timed{m}": sets.candidate.held.get(m)})
                    link.send({"kept": keep})
                elif "reveal" in message:
                    reveal = [int(m) for m in message["reveal"]]
                    for m in reveal:
                        packed = kept.pop(m, None) or tensor_files.pack({f"timed{m}": sets.candidate.held.get(m)})
                        tensor_files.write_packed(Path(reveal_dir) / f"timed{m}.safetensors", packed)
                    link.send({"revealed": reveal})
                elif "end" in message:
                    link.send({"ended": True})
                    return
                if between is not None:
                    between()
            except LazyOutput as exc:
                link.send({"failed": str(exc), "kind": "lazy_output"})
                return
            except TimingMismatch as exc:
                link.send({"failed": str(exc), "kind": "stale_output"})
                return
            except Exception as exc:  # noqa: BLE001 - the candidate raised while being timed
                link.send({"failed": exception_text(exc), "kind": "candidate_error"})
                return


def _warm(sets: TimingSets, calls: int) -> dict[str, Any]:
    """Untimed pairs on the rotating sets (fewer once they have run config.WINDOW_WARMUP_MS): the device's state
    after the hand-over settles here. Their times choose the block size; their launches, the spin."""
    pair_ms: list[float] = []
    for _ in range(calls):
        pair_ms.append(sets.candidate.time_call() + sets.eager.time_call())
        if sum(pair_ms) >= config.WINDOW_WARMUP_MS:
            break
    launches = [statistics.median(t.launch_ms[-5:]) for t in (sets.candidate, sets.eager) if t.launch_ms]
    return {"warmed": len(pair_ms), "pair_ms": pair_ms, "launch_ms": max(launches) if launches else None}


def serve_refereed_window(job: dict[str, Any], prepared: TimingSets, guard: Any) -> None:
    """The timing window, refereed by the parent through the FIFOs in the job's `window_dir`: the figures are the
    parent's (referee.py), so nothing about them goes into this process's result. The guard looks at random
    moments between answers."""
    from builder.verify.protocol.window import FifoLink

    if not job.get("window_dir"):
        return
    link = FifoLink.child_side(job["window_dir"])
    try:
        serve_window(link, prepared, job["window_dir"], between=lambda: guard.maybe_check("in the timing window"))
    finally:
        link.close()


def bytes_tensor(data: bytes) -> Any:
    """`data` as a uint8 tensor: how a JSON text travels in a tensor file."""
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)
