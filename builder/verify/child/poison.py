"""Fill the allocator's free memory with NaN before each candidate call (untrusted child side).

A kernel that allocates its output with `empty_like` and writes only part of it must not inherit valid
numbers from a buffer the reference (or an earlier call) freed. After poisoning, the unwritten part
holds the poison: all-ones bytes (config.POISON_FILL_BYTE), a NaN in every float format that no
arithmetic produces, so `holds_poison` tells an unwritten element (`uninitialized_output`) from a NaN
the kernel computed (plain `incorrect`).

CUDA: PyTorch's caching allocator keeps freed blocks for reuse, so NaN tensors allocated and released
here are handed out again to the candidate's allocations (large blocks are split, small ones come from
the same 2 MiB segments). CPU: glibc malloc reuses freed heap chunks; `configure_cpu_allocator` stops it
from returning large blocks to the OS (which would come back as zero pages). The CPU poison is best
effort for tiny outputs; the NaN check in `checks` does not depend on it.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from builder import config

_GLIBC_M_TRIM_THRESHOLD = -1
_GLIBC_M_MMAP_THRESHOLD = -3
_cpu_allocator_configured = False


def configure_cpu_allocator() -> bool:
    """Keep freed blocks up to CPU_MALLOC_MMAP_THRESHOLD in the heap (glibc only). True when applied."""
    global _cpu_allocator_configured
    if _cpu_allocator_configured:
        return True
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): poison stays best effort
        return False
    ok_mmap = mallopt(_GLIBC_M_MMAP_THRESHOLD, config.CPU_MALLOC_MMAP_THRESHOLD)
    ok_trim = mallopt(_GLIBC_M_TRIM_THRESHOLD, config.CPU_MALLOC_TRIM_THRESHOLD)
    _cpu_allocator_configured = bool(ok_mmap and ok_trim)
    return _cpu_allocator_configured


def _nan_buffer(nbytes: int, device: str):
    import torch

    # An int32 of four fill bytes: any float view of these bytes reads the poison NaN. (Allocated as
    # 4-byte elements like the outputs it stands in for: the CPU heap then recycles it the same way.)
    word = int.from_bytes(bytes([config.POISON_FILL_BYTE]) * 4, "little", signed=True)  # 0xFF bytes: -1
    return torch.full(((max(nbytes, 4) + 3) // 4,), word, dtype=torch.int32, device=device)


_SAME_WIDTH_INT = {2: "int16", 4: "int32", 8: "int64"}


def poison_cuda(output_bytes: list[int]) -> int:
    """Allocate, NaN-fill and release GPU memory; returns the bytes poisoned."""
    import torch

    free, _total = torch.cuda.mem_get_info()
    budget = min(config.POISON_BYTES, int(free * config.POISON_FREE_FRACTION))
    buffers = []
    poisoned = 0
    # Output-sized blocks first: the allocator prefers an exact-size cached block for the next request.
    for nbytes in output_bytes:
        for _ in range(2):
            if poisoned + nbytes > budget:
                break
            buffers.append(_nan_buffer(nbytes, "cuda"))
            poisoned += nbytes
    while poisoned < budget:
        chunk = min(config.POISON_CHUNK_BYTES, budget - poisoned)
        if chunk < (1 << 20):
            break
        try:
            buffers.append(_nan_buffer(chunk, "cuda"))
        except torch.OutOfMemoryError:
            break
        poisoned += chunk
    # Released to the caching allocator (not to the driver: no empty_cache), so the candidate gets them.
    del buffers
    return poisoned


def reserve_cuda(nbytes: int) -> int:
    """Take one block of `nbytes` (at most `EVAL_DEVICE_RESERVE_FREE_FRACTION` of the free memory) from the driver
    and release it to the caching allocator; returns its size (0: none taken).

    A pre-started child does this before its job: the task's tensors, the poison and the outputs are then split
    from that block instead of each asking the driver for memory, and the driver serves one process's request at a
    time for the whole box while other processes make and end CUDA contexts (measured 2026-11-26). The
    poison is unchanged: it takes its blocks by the same best-fit rule the candidate's next allocations follow,
    and freeing them merges them back into the block they were split from. No kernel runs here (the block is not
    filled), so a spare child takes no turn on a device that another child may be timing on."""
    import torch

    if nbytes <= 0:
        return 0
    free, _total = torch.cuda.mem_get_info()
    size = min(nbytes, int(free * config.EVAL_DEVICE_RESERVE_FREE_FRACTION))
    if size < (1 << 20):
        return 0
    try:
        block = torch.empty(size, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        return 0
    del block  # to the caching allocator, not to the driver (no empty_cache)
    return size


def poison_cpu(output_bytes: list[int]) -> int:
    """Allocate, NaN-fill and free heap buffers near each output's size; returns the bytes poisoned."""
    configure_cpu_allocator()
    buffers = []
    poisoned = 0
    for nbytes in output_bytes:
        # Slightly larger sizes too: aligned allocations carve a request out of a bigger free chunk, and
        # adjacent freed buffers coalesce into one NaN-filled region that later requests are split from.
        for extra in (0, 64, 128, 256, 512, 1024, 4096):
            buffers.append(_nan_buffer(nbytes + extra, "cpu"))
        # Each allocation takes the best-fitting free chunk, so many of them drain the free chunks that
        # the candidate's empty_like could otherwise get (holding old outputs) and NaN-fill them all.
        copies = config.POISON_CPU_BUDGET_BYTES // max(nbytes, 1)
        copies = max(config.POISON_CPU_COPIES, min(config.POISON_CPU_MAX_COPIES, copies))
        for _ in range(copies):
            buffers.append(_nan_buffer(nbytes, "cpu"))
        poisoned += nbytes * (copies + 7)
    del buffers
    return poisoned


def poison_free_memory(device: str, output_bytes: list[int]) -> int:
    """Poison the allocator that the candidate's next allocations on `device` will come from."""
    if device == "cuda":
        return poison_cuda(output_bytes)
    return poison_cpu(output_bytes)
