"""How many hardware work queues a candidate's CUDA context gets (trusted parent side).

The driver makes and ends CUDA contexts one at a time for the whole box, and most of a context's turn is its
work queues (`CUDA_DEVICE_MAX_CONNECTIONS`, 8 by default): beside seven other workers on one GPU a fresh context
took 2.07 s with 8 and 0.96 s with 2 (measured). Every verified kernel costs one context, so evaluation
children make theirs with `config.EVAL_DEVICE_CONNECTIONS` queues.

Queues only matter to work on more than one stream: streams share a queue when there are fewer queues than
streams, so their work can run one after the other where the driver's default would overlap it (which can hide
a race between streams, and slows an honest multi-stream kernel). Work on one stream runs in order on one queue
whatever the count. So a candidate gets the driver's default wherever its work may span streams:
- before it runs, by its source (`may_span_streams`): it makes or switches streams, captures or launches CUDA
  graphs (whose branches run side by side), or reaches the runtime by name (dlsym, token pasting, getattr), and
- after it ran, by what its child saw (`spanned_streams`): the op census found device work on more than one
  stream or on another stream than the one it was called on, or a graph launch. Its evaluation is then run
  again in a child with the driver's default, and only that run makes its record. The census is the child's
  claim: it finds honest kernels' streams. A candidate that hid its streams from the scan and the census alike
  would run them one after the other, where a race between them may not show.
References and candidates' children use the same count (a task's reference is PyTorch on one stream); the
baselines' children, which time PyTorch for the record's speedups, keep the driver's default. The record's
`device_connections` says which count the candidate's child had (null: the driver's default).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from builder import config
from builder.verify.judge.source_text import strip_comments_and_strings

if TYPE_CHECKING:
    from builder.candidates import Candidate
    from builder.verify.options import VerifyOptions

DRIVER_DEFAULT = 0  # VerifyOptions.device_connections: leave the count to the driver

# C++/CUDA, comments and strings blanked: streams made, taken from torch's pools or made current, graphs, and
# the ways to call the runtime by a name the scan cannot see.
_CPP_SPANS_STREAMS = re.compile(
    r"\b(?:cu|cuda)Stream(?:Create|BeginCapture)\w*"
    r"|\bgetStreamFrom(?:Pool|External)\b|\bsetCurrentCUDAStream\b|\bCUDAStreamGuard\b|\bCUDAMultiStreamGuard\b"
    r"|\b(?:cu|cuda)Graph\w*|\bcudaStream(?:PerThread|Legacy)\b|\bCU_STREAM_PER_THREAD\b|\bCU_STREAM_LEGACY\b"
    r"|\bcuGetProcAddress\w*|\bcudaGetDriverEntryPoint\w*|\bdlopen\b|\bdlsym\b|##"
)
# Python, the whole text (an inline extension's C++ sits in its strings): the same, torch's stream and graph
# APIs, torch.compile modes that capture graphs, and dynamic lookups or imports.
_PY_SPANS_STREAMS = re.compile(
    _CPP_SPANS_STREAMS.pattern
    + r"|\bStream\b|\bstream\s*\(|\bExternalStream\b|\bset_stream\b|[Gg]raph|reduce-overhead|max-autotune"
    r"|\bgetattr\b|\b__import__\b|\bimportlib\b|(?<![\w.])(?:eval|exec)\s*\(|\bctypes\b|\bcupy\b|\bcuda\.bindings\b"
)


def queues(options: VerifyOptions) -> int | None:
    """The work queues a candidate's child of these options gets: a count, or None for the driver's default."""
    if options.backend != "cuda":
        return None
    wanted = config.EVAL_DEVICE_CONNECTIONS if options.device_connections is None else options.device_connections
    return wanted if wanted and wanted > 0 else None


def driver_default(options: VerifyOptions) -> VerifyOptions:
    """These options with the work queues left to the driver."""
    return (
        options if options.device_connections == DRIVER_DEFAULT else replace(options, device_connections=DRIVER_DEFAULT)
    )


def may_span_streams(candidate: Candidate) -> bool:
    """Whether the candidate's source may put work on more than one stream (see the module's docstring)."""
    if candidate.language == "python":
        return bool(_PY_SPANS_STREAMS.search(candidate.source))
    return bool(_CPP_SPANS_STREAMS.search(strip_comments_and_strings(candidate.source)))


def fitting(candidate: Candidate, options: VerifyOptions) -> VerifyOptions:
    """The options to evaluate the candidate with: the driver's queues where its source may span streams."""
    return driver_default(options) if queues(options) and may_span_streams(candidate) else options


def spanned_streams(result: dict[str, Any] | None) -> bool:
    """Whether the child's op census saw device work on more than one stream or off the stream it was called
    on, or a CUDA graph launched."""
    census = (result or {}).get("op_census")
    if not isinstance(census, dict):
        return False

    def count(key: str) -> int:  # the child's claim: anything but a count is none
        value = census.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return count("other_streams") > 0 or count("streams") > 1 or count("graph_launches") > 0
