"""An output's digest, by which the candidate's child commits to a timed call's output before it learns whether
the parent will ask to see it (`protocol/window.py`).

A digest must bind: once committed, no other output that the judge would accept may have it. A sum of the output's
words did not (a child that skipped work in its timed calls could commit any sum, then, asked to reveal, nudge the
true output's values within the tolerance until its words summed to the commitment). So the digest is SHA-256,
over a tree that a GPU hashes a chunk a thread:

- the output's bytes are cut into `CHUNK` byte chunks, the last zero-filled, and each chunk's SHA-256 taken; the
  digests, in order, are the next level's bytes, cut and hashed again, until a level is at most `CHUNK` bytes;
- the digest is SHA-256 of `TAG`, the output's length (8 bytes, little-endian) and that last level.

The child hashes on its device (`DIGEST_KERNEL`, compiled by the NVRTC that torch's CUDA build loads) and finishes
on its host; the parent hashes a revealed file with `hashlib`, bit for bit the same. Where the kernel cannot be
had, the child hashes on its host: slower, the same digest. The parent names the device's architecture
(`config.DIGEST_KERNEL_ARCH_ENV`), and a zygote has the kernel compiled once for every child it forks
(`compile_kernel_apart`); a child without it compiles its own.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

# Bytes a thread hashes (SHA-256 of exactly CHUNK bytes: 64 blocks and one fixed padding block). DIGEST_KERNEL
# spells it, and its length in bits, as literals (a test ties them).
CHUNK = 4096
DIGEST_BYTES = 32
TAG = b"kernel-archive output digest 1\n"
THREADS_PER_BLOCK = 128
KERNEL_NAME = "ka_sha256_chunks"

DIGEST_KERNEL = r"""
__constant__ unsigned int ka_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

__device__ __forceinline__ unsigned int ka_rotr(unsigned int x, int n) { return (x >> n) | (x << (32 - n)); }

// Thread t: SHA-256 of chunk t (4096 bytes of `data`, zero past `last_bytes` in the last chunk) into out[32 t..].
// `data` is 4-byte aligned; the chunk's length is fixed, so its padding block is too.
extern "C" __global__ void ka_sha256_chunks(const unsigned char* data, unsigned char* out, int chunks,
                                            int last_bytes) {
    int chunk = blockIdx.x * blockDim.x + threadIdx.x;
    if (chunk >= chunks) return;
    const unsigned char* base = data + (size_t)chunk * 4096;
    int length = chunk == chunks - 1 ? last_bytes : 4096;
    unsigned int h[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                         0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    unsigned int w[64];
    for (int block = 0; block <= 64; ++block) {
        for (int i = 0; i < 16; ++i) {
            unsigned int word = 0;
            if (block == 64) {
                word = i == 0 ? 0x80000000u : (i == 15 ? 32768u : 0u);  // 0x80, zeros, the length in bits
            } else {
                int at = block * 64 + i * 4;
                if (at + 4 <= length) {
                    word = __byte_perm(*(const unsigned int*)(base + at), 0, 0x0123);  // big-endian words
                } else {
                    for (int b = 0; b < 4; ++b) word = (word << 8) | (at + b < length ? base[at + b] : 0u);
                }
            }
            w[i] = word;
        }
        for (int i = 16; i < 64; ++i) {
            unsigned int s0 = ka_rotr(w[i - 15], 7) ^ ka_rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            unsigned int s1 = ka_rotr(w[i - 2], 17) ^ ka_rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        unsigned int a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
        for (int i = 0; i < 64; ++i) {
            unsigned int t1 = k + (ka_rotr(e, 6) ^ ka_rotr(e, 11) ^ ka_rotr(e, 25)) + ((e & f) ^ (~e & g)) + ka_k[i] + w[i];
            unsigned int t2 = (ka_rotr(a, 2) ^ ka_rotr(a, 13) ^ ka_rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
        }
        h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
    }
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 4; ++j) out[(size_t)chunk * 32 + i * 4 + j] = (unsigned char)(h[i] >> (24 - 8 * j));
}
"""


def digest_bytes(data: bytes | memoryview) -> str:
    """The digest of raw bytes, on the host (the parent's side, and the child's without the kernel)."""
    level = memoryview(data).cast("B")
    length = len(level)
    while len(level) > CHUNK:
        level = memoryview(hash_chunks(level))
    return _finish(length, level)


def hash_chunks(level: memoryview) -> bytes:
    """One level of the tree: each CHUNK bytes' SHA-256, the last chunk zero-filled."""
    digests = bytearray()
    for start in range(0, len(level), CHUNK):
        piece = level[start : start + CHUNK]
        if len(piece) < CHUNK:
            piece = bytes(piece) + bytes(CHUNK - len(piece))
        digests += hashlib.sha256(piece).digest()
    return bytes(digests)


def digest_tensor(tensor: Any) -> str:
    """The digest of one tensor's bytes (contiguous, in memory order): on its device where the kernel is had."""
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8)
    if raw.device.type == "cuda" and raw.numel() > CHUNK and (kernel := device_kernel()) is not None:
        return _digest_on_device(raw, kernel)
    return digest_bytes(raw.cpu().numpy().tobytes() if raw.numel() else b"")


def _digest_on_device(raw: Any, kernel: Any) -> str:
    import torch

    level, length = raw, raw.numel()
    while level.numel() > CHUNK:
        if level.data_ptr() % 4:  # a view at an odd offset: the kernel reads whole words
            level = level.clone()
        chunks = -(-level.numel() // CHUNK)
        out = torch.empty(chunks * DIGEST_BYTES, dtype=torch.uint8, device=level.device)
        blocks = -(-chunks // THREADS_PER_BLOCK)
        kernel(grid=(blocks, 1, 1), block=(THREADS_PER_BLOCK, 1, 1),
               args=[level, out, chunks, level.numel() - (chunks - 1) * CHUNK])  # fmt: skip
        level = out
    return _finish(length, memoryview(level.cpu().numpy().tobytes()))


def _finish(length: int, level: memoryview | bytes) -> str:
    return hashlib.sha256(TAG + length.to_bytes(8, "little") + bytes(level)).hexdigest()


_COMPILED: dict[str, bytes] = {}  # compute capability ("90") -> the kernel's CUBIN, compiled by NVRTC
COMPILED_BEFORE_USE: list[bool] = []  # [whether the kernel this process loaded had been compiled before it was wanted]


def compile_kernel_apart(arch: str) -> None:
    """The kernel's CUBIN for compute capability `arch` ("90"), compiled by a process of its own and kept in this
    one for its forked children. NVRTC initialises the GPU driver (it opens /dev/nvidiactl), after which a forked
    child cannot use CUDA: a zygote must not call it itself (`child/main.py`). Where this fails, a child compiles
    its own."""
    from builder import config

    try:
        library = loaded_library_path(_nvrtc_soname())
        done = subprocess.run([sys.executable, "-m", __name__, library, arch], capture_output=True,
                              timeout=config.DIGEST_KERNEL_COMPILE_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return
    if done.returncode == 0 and done.stdout:
        _COMPILED[arch] = done.stdout


def _nvrtc_soname() -> str:
    import torch

    if not torch.version.cuda:
        raise OSError("a torch without CUDA has no NVRTC")
    return f"libnvrtc.so.{torch.version.cuda.split('.')[0]}"


def loaded_library_path(soname: str, maps: str = "/proc/self/maps") -> str:
    """The file of shared library `soname` as this process maps it, loaded first where it is not (torch's CUDA
    build loads NVRTC from its own wheels, where another process would not find it by name). Loading it runs no
    NVRTC code: a zygote stays fit to fork."""
    import ctypes

    ctypes.CDLL(soname)
    if path := mapped_path(soname, Path(maps).read_text()):
        return path
    raise OSError(f"{soname} is not mapped")


def mapped_path(soname: str, maps_text: str) -> str | None:
    """The path of the first mapping of a file named `soname` (or `soname`.x.y) in /proc/PID/maps' text."""
    for line in maps_text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and Path(fields[5]).name.startswith(soname):
            return fields[5]
    return None


def _nvrtc_cubin(source: str, arch: str, library: str) -> bytes:
    """NVRTC's CUBIN of `source` for sm_`arch`, called through ctypes. Not torch's helper for it: that imports
    `torch.utils.cpp_extension`, whose device query leaves CUDA unusable in a forked child too."""
    import ctypes

    nvrtc = ctypes.CDLL(library)

    def check(code: int) -> None:
        if code != 0:
            raise RuntimeError(f"NVRTC error {code}")

    program = ctypes.c_void_p()
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"ka_output_digest.cu", 0, None, None))
    try:
        options = [f"--gpu-architecture=sm_{arch}".encode()]
        check(nvrtc.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options)))
        size = ctypes.c_size_t()
        check(nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size)))
        cubin = ctypes.create_string_buffer(size.value)
        check(nvrtc.nvrtcGetCUBIN(program, cubin))
        return cubin.raw
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))


@functools.cache
def device_kernel() -> Any:
    """The chunk kernel loaded on this process's device (once) and checked, or None where that cannot be done (no
    NVRTC, an older torch): the digest is then hashed on the host."""
    try:
        import torch

        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}{minor}"
        COMPILED_BEFORE_USE[:] = [arch in _COMPILED]
        cubin = _COMPILED.get(arch) or _nvrtc_cubin(DIGEST_KERNEL, arch, _nvrtc_soname())
        from torch.cuda._utils import _cuda_load_module

        kernel = _cuda_load_module(cubin, [KERNEL_NAME])[KERNEL_NAME]
        # Its answer on a known buffer first: a kernel that hashed wrong would fail every honest kernel's reveal.
        probe = torch.arange(3 * CHUNK + 123, dtype=torch.int64, device="cuda").mul_(2654435761).view(torch.uint8)
        if _digest_on_device(probe, kernel) != digest_bytes(probe.cpu().numpy().tobytes()):
            return None
        return kernel
    except Exception:  # noqa: BLE001 - any failure leaves the host's hash, which gives the same digest
        return None


def arch_digits(compute_capability: str | None) -> str | None:
    """NVRTC's spelling ("90") of a compute capability as nvidia-smi gives it ("9.0"), or None."""
    digits = (compute_capability or "").replace(".", "").strip()
    return digits if digits.isdigit() else None


def is_digest(value: Any) -> bool:
    """A digest as it crosses the boundary: SHA-256 in lower-case hex."""
    return (isinstance(value, str) and len(value) == 2 * DIGEST_BYTES
            and all(c in "0123456789abcdef" for c in value))  # fmt: skip


if __name__ == "__main__":  # compile_kernel_apart's process: LIBRARY ARCH in, the CUBIN out
    sys.stdout.buffer.write(_nvrtc_cubin(DIGEST_KERNEL, sys.argv[2], sys.argv[1]))
