"""The output digest (`protocol/output_digest.py`): its definition, the host's hash, and the device's kernel on a
GPU box giving the host's digest bit for bit."""

from __future__ import annotations

import hashlib
import time

import pytest
import torch

from builder.verify.protocol import output_digest
from builder.verify.protocol.output_digest import CHUNK, TAG, digest_bytes, digest_tensor, is_digest


def spelled_out(data: bytes) -> str:
    """The definition, written out level by level."""
    level = data
    while len(level) > CHUNK:
        padded = level + bytes(-len(level) % CHUNK)
        level = b"".join(hashlib.sha256(padded[i : i + CHUNK]).digest() for i in range(0, len(padded), CHUNK))
    return hashlib.sha256(TAG + len(data).to_bytes(8, "little") + level).hexdigest()


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 5, 128 * 4096, 128 * 4096 + 1, 2_000_003])
def test_the_digest_is_its_definition_at_every_level(size):
    data = bytes((i * 2654435761 >> 7) & 0xFF for i in range(size))
    assert digest_bytes(data) == spelled_out(data)
    assert is_digest(digest_bytes(data))


def test_the_kernel_spells_the_hosts_chunk():
    """The device's kernel writes the chunk's size and its length in bits as literals: they are the host's CHUNK."""
    kernel = output_digest.DIGEST_KERNEL
    assert f"(size_t)chunk * {CHUNK}" in kernel and f": {CHUNK};" in kernel and f"{CHUNK * 8}u" in kernel
    assert f"{output_digest.DIGEST_BYTES} + i * 4" in kernel and output_digest.KERNEL_NAME in kernel


def test_the_length_is_part_of_the_digest():
    """Zero-filling the last chunk makes `x` and `x` + zeros hash alike chunk by chunk; the length tells them apart."""
    data = bytes(range(256)) * 20
    assert digest_bytes(data) != digest_bytes(data + bytes(10))
    assert digest_bytes(b"") != digest_bytes(bytes(1))


def test_a_tensors_digest_is_that_of_its_bytes_in_memory_order_whatever_its_layout():
    generator = torch.Generator().manual_seed(3)
    values = [torch.randn(4097, generator=generator), torch.randn(33, generator=generator).half(),
              torch.randn(9, generator=generator).to(torch.bfloat16), torch.randint(-99, 99, (7,), dtype=torch.int8),
              torch.tensor([True, False, True]), torch.tensor(2.5), torch.randn(6, 5, generator=generator).t(),
              torch.empty(0, 3)]  # fmt: skip
    for tensor in values:
        raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        assert digest_tensor(tensor) == digest_bytes(raw), tensor.dtype
    assert digest_tensor(values[6]) == digest_tensor(values[6].contiguous())


def test_values_a_ulp_apart_whose_words_sum_alike_have_other_digests():
    value = torch.randn(10_000, generator=torch.Generator().manual_seed(9))
    words = value.clone().view(torch.int32)
    words[17] += 1
    words[9_000] -= 1
    nudged = words.view(torch.float32)
    assert int(nudged.view(torch.int32).sum(dtype=torch.int64)) == int(value.view(torch.int32).sum(dtype=torch.int64))
    assert torch.allclose(nudged, value, atol=1e-6, rtol=1e-6)
    assert digest_tensor(nudged) != digest_tensor(value)


def test_without_a_gpu_the_kernel_is_not_had_and_the_host_hashes():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the device's test covers it")
    assert output_digest.device_kernel() is None
    assert digest_tensor(torch.arange(10_000)) == digest_bytes(torch.arange(10_000).numpy().tobytes())


def test_a_compute_capability_is_spelled_for_nvrtc():
    assert output_digest.arch_digits("9.0") == "90" and output_digest.arch_digits("10.0") == "100"
    assert output_digest.arch_digits(None) is None and output_digest.arch_digits("[N/A]") is None


def test_without_nvrtc_nothing_is_compiled_apart_and_a_child_would_hash_on_its_host(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the device's test covers it")
    monkeypatch.setattr(output_digest, "_COMPILED", {})
    output_digest.compile_kernel_apart("90")  # a CPU-only torch has no NVRTC: said nowhere, no process started
    assert output_digest._COMPILED == {}


def test_the_nvrtc_a_process_loaded_is_found_by_its_mapped_file():
    maps = """7f3a1000-7f3a2000 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6
7f3b1000-7f3b2000 r-xp 00000000 08:01 2 /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc-builtins.so.13.0
7f3c1000-7f3c2000 r-xp 00000000 08:01 3 /opt/venv/site-packages/nvidia/cu13/lib/libnvrtc.so.13
7f3d1000-7f3d2000 rw-p 00000000 00:00 0 [heap]
"""
    assert output_digest.mapped_path("libnvrtc.so.13", maps) == "/opt/venv/site-packages/nvidia/cu13/lib/libnvrtc.so.13"
    assert output_digest.mapped_path("libnvrtc.so.12", maps) is None


def test_a_zygote_has_the_kernel_compiled_for_the_architecture_its_parent_named(monkeypatch):
    """before_fork: once for every child the zygote forks; no name (a CPU build, no GPU found), no compile."""
    from builder import config
    from builder.verify.child import main

    asked: list[str] = []
    monkeypatch.setattr(main, "_prepare_process", lambda init_cuda, prime: None)
    monkeypatch.setattr(output_digest, "compile_kernel_apart", asked.append)
    monkeypatch.setenv(config.DIGEST_KERNEL_ARCH_ENV, "90")
    main.before_fork()
    monkeypatch.delenv(config.DIGEST_KERNEL_ARCH_ENV)
    main.before_fork()
    assert asked == ["90"]


def test_evaluation_children_are_told_their_gpus_architecture(monkeypatch):
    from builder import config
    from builder.verify import environment
    from builder.verify.engine.children import child_env
    from builder.verify.options import VerifyOptions

    monkeypatch.setattr(environment, "gpu_arch", lambda index=0: {0: "9.0", 1: "10.0"}.get(index))
    assert child_env(VerifyOptions(backend="cuda", device_index=0))[config.DIGEST_KERNEL_ARCH_ENV] == "90"
    assert child_env(VerifyOptions(backend="cuda", device_index=1))[config.DIGEST_KERNEL_ARCH_ENV] == "100"
    assert config.DIGEST_KERNEL_ARCH_ENV not in child_env(VerifyOptions(backend="cuda", device_index=2))
    assert config.DIGEST_KERNEL_ARCH_ENV not in child_env(VerifyOptions(backend="cpu"))


@pytest.mark.gpu
def test_on_cuda_a_zygote_has_the_kernel_compiled_apart_and_its_forked_child_only_loads_it():
    """What a zygote does (the kernel compiled by a process of its own, for the architecture nvidia-smi names),
    then what its forked child does (load and check, no second compile), in a fresh process whose CUDA is not yet
    initialized; the zygote stays fit to fork."""
    import subprocess
    import sys

    from builder import config
    from builder.verify import environment

    arch = output_digest.arch_digits(environment.gpu_arch(0))
    assert arch, "nvidia-smi named no compute capability"
    script = f"""
import os, time, torch
from builder.verify.protocol import output_digest
from builder.verify.sandbox.zygote import fork_problem
began = time.perf_counter()
output_digest.compile_kernel_apart({arch!r})
compiled = time.perf_counter()
assert {arch!r} in output_digest._COMPILED, "the process apart compiled nothing"
assert fork_problem() is None, fork_problem()
pid = os.fork()
if pid == 0:
    ok = output_digest.device_kernel() is not None and output_digest.COMPILED_BEFORE_USE == [True]
    loaded = time.perf_counter()
    print(f"compiled apart in {{compiled - began:.3f}} s; the forked child made its context, loaded and checked the "
          f"kernel in {{loaded - compiled:.3f}} s")
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
raise SystemExit(os.waitstatus_to_exitcode(status))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=config.REPO_ROOT,
                          timeout=120)  # fmt: skip
    print(done.stdout, done.stderr[-2000:])
    assert done.returncode == 0


@pytest.mark.gpu
def test_on_cuda_the_devices_digest_is_the_hosts_bit_for_bit():
    """Sizes below, at and across a chunk and a level, odd byte counts, views at odd offsets; then what a digest
    costs on the device against the sum of words it replaced (printed, not asserted)."""
    began = time.perf_counter()
    assert output_digest.device_kernel() is not None, "NVRTC or the kernel's check failed: digests on the host"
    print(f"the kernel compiled, loaded and checked in {time.perf_counter() - began:.3f} s")
    generator = torch.Generator(device="cuda").manual_seed(11)
    base = torch.randint(0, 256, (40 * 1024 * 1024 + 77,), dtype=torch.uint8, device="cuda", generator=generator)
    sizes = [1, 3, 4095, 4096, 4097, 4099, 65_537, 128 * 4096, 128 * 4096 + 1, 128 * 128 * 4096 + 5, base.numel()]
    for size in sizes:
        for offset in (0, 1, 3):
            if offset + size > base.numel():
                continue
            view = base[offset : offset + size]
            assert digest_tensor(view) == digest_bytes(view.cpu().numpy().tobytes()), (size, offset)
    for tensor in (torch.randn(4097, device="cuda").half(), torch.randn(300, 301, device="cuda").t(),
                   torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)):  # fmt: skip
        assert digest_tensor(tensor) == digest_bytes(tensor.contiguous().cpu().view(torch.uint8).numpy().tobytes())

    for mib in (0.004, 1, 16, 64):
        value = torch.randn(int(mib * 2**18), device="cuda")
        for name, fn in (("sha256 tree", lambda v=value: digest_tensor(v)),
                         ("int32 sum", lambda v=value: int(v.view(torch.int32).sum(dtype=torch.int64)))):  # fmt: skip
            fn()
            torch.cuda.synchronize()
            began = time.perf_counter()
            for _ in range(20):
                fn()
            print(f"digest of {mib:g} MiB, {name}: {(time.perf_counter() - began) / 20 * 1e3:.3f} ms a call")
