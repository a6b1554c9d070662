"""Tell a candidate's own GPU kernels from library kernels (ATen, cuBLAS, cuDNN, CUTLASS, ...).

Shared by the torch-profiler summary (own-vs-library device time), the ncu entries (`library` per
kernel) and the verifier's `uses_torch_ops` flag, so that all three agree on what "own" means.
A name-based classifier is a heuristic: a candidate that calls cub/thrust templates gets those
kernels counted as library work, which is what they are.
"""

from __future__ import annotations

import re

# Prefixes of kernel names (as CUPTI / ncu report them, demangled, optionally after "void ")
# that belong to libraries shipped with PyTorch or the CUDA toolkit.
LIBRARY_KERNEL_PREFIXES = (
    "at::",
    "at_cuda_detail::",
    "c10::",
    "cub::",
    "cub_",
    "thrust::",
    "cutlass",
    "cublas",
    "cudnn",
    "cusparse",
    "cufft",
    "curand",
    "cutensor",
    "nccl",
    "flash::",
    "pytorch_flash::",
    "fmha",
    "triton_",  # torch.compile / inductor output, not the candidate's own code
)

# Patterns matched anywhere in the name: cuBLAS / cuDNN / CUTLASS internal kernel families whose
# names carry no namespace (sm90_xmma_gemm_..., ampere_sgemm_..., nvjet_..., gemv2T_kernel...).
LIBRARY_KERNEL_PATTERNS = re.compile(
    r"^(?:sm\d+_xmma|xmma_|sm\d+_|ampere_|volta_|turing_|hopper_|maxwell_|nvjet|gemv|gemmk1|gemmSN|"
    r"splitKreduce|cutlass|implicit_convolve|winograd|regular_fft|vector_fft|nchwToNhwc|nhwcToNchw|"
    r"cunn_|elementwise_kernel|vectorized_elementwise_kernel|unrolled_elementwise_kernel|reduce_kernel|"
    r"indexSelect|CatArrayBatchedCopy|distribution_elementwise)",
    re.IGNORECASE,
)

_LEADING_NOISE = re.compile(r"^(?:void\s+|\(anonymous namespace\)::|\s+)+")


def normalise_kernel_name(name: str) -> str:
    """Strip the `void ` return type and anonymous-namespace prefixes that demangled names carry."""
    return _LEADING_NOISE.sub("", name or "").strip()


def is_library_kernel(name: str) -> bool:
    """True when a GPU kernel (or memcpy/memset activity) comes from a library, not the candidate."""
    bare = normalise_kernel_name(name)
    if not bare:
        return False
    lowered = bare.lower()
    if lowered.startswith(LIBRARY_KERNEL_PREFIXES):
        return True
    # The activity names CUPTI gives copies and fills ("Memcpy HtoD (Pageable -> Device)", "Memset (Device)").
    if lowered.startswith(("memcpy ", "memset ")):
        return True
    return bool(LIBRARY_KERNEL_PATTERNS.match(bare))


def is_library_op(name: str) -> bool:
    """True for a CPU-side profiler op that is a library operator (aten::, c10d::, cudnn, ...)."""
    return (name or "").startswith(("aten::", "c10d::", "cudnn", "cublas", "torch::", "prim::", "cuda"))
