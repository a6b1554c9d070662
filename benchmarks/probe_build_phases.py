"""Where does one candidate's build spend its time? The figures behind the start's latency (the first evaluated
record waits for the first build).

A bundled CUDA candidate is built the way a compile child builds it (`torch.utils.cpp_extension.load`, one `.cu`
holding the candidate's kernels and its PYBIND11_MODULE, the builder's flags), with nvcc's `--time` report of each
phase (cudafe++, cicc, ptxas, the host compiler, ...): first alone, then `--parallel` builds at once, as a
stream's first window starts them. Then the host compiler on torch's headers alone, without and with the
pybind11 module that binds `forward` (what a build would save by moving the binding to a `.cpp` of its own), and
that `.cpp` against a gcc precompiled header of `<torch/extension.h>`. `--headers full,light` repeats the builds
with the candidate's `<torch/extension.h>` replaced by the two headers a CUDA kernel's code and its binding need
(`LIGHT_HEADERS`). `lean` goes further: torch's own `torch/types.h` (the `torch::` names, its factories) without
its `<ATen/ATen.h>` and `<torch/library.h>`, ATen's headers taken one operator at a time (`AT_PER_OPERATOR_HEADERS`,
as torch builds itself), so that only the Tensor class, the factories, the dispatch macros and the operators on
tensors are parsed: the builder's own lean header (`headers.lean_header_text`). Run it on an otherwise idle GPU machine:

    python benchmarks/probe_build_phases.py [--candidate PATH] [--parallel 8] [--headers full,light,lean] [--no-host] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder import config  # noqa: E402
from builder.verify.compile.headers import lean_header_text  # noqa: E402

SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
DEFAULT_CANDIDATE = ROOT / "data/candidates/cuda/level1/10_conv2d_strided_asymmetric/naive_direct.cu"

ONE_BUILD = """
import json, resource, sys, time
started = time.monotonic()
from torch.utils import cpp_extension
imported = time.monotonic()
source, build_dir, timing = sys.argv[1:4]
module = cpp_extension.load(name="probe_" + build_dir.rsplit("/", 1)[-1].replace("-", "_"), sources=[source],
                            extra_cflags=["-O3"], extra_cuda_cflags=["-O3", "--time", timing],
                            build_directory=build_dir, with_cuda=True, verbose=False)
done = time.monotonic()
usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print(json.dumps({"import_torch_s": imported - started, "load_s": done - imported, "wall_s": done - started,
                  "core_s": sum(u.ru_utime + u.ru_stime for u in usage)}))
"""

FULL_HEADER = "#include <torch/extension.h>"
LIGHT_HEADERS = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>"
LEAN_NAME = config.LEAN_HEADER_NAME

BINDING = """
#include <torch/extension.h>
torch::Tensor forward(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> b);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "forward"); }
"""


def lean_header() -> str:
    """The lean header the builder writes beside a source (`headers.lean_header_text`)."""
    text = lean_header_text()
    if text is None:
        raise SystemExit("torch/types.h here is not as the lean header expects: no lean variant")
    return text


def build_once(source: Path, work: Path, label: str) -> dict:
    build_dir = work / label
    build_dir.mkdir(parents=True)
    timing = build_dir / "nvcc-time.csv"
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", ONE_BUILD, str(source), str(build_dir), str(timing)],
                         capture_output=True, text=True)  # fmt: skip
    if run.returncode != 0:
        raise SystemExit(f"build {label} failed: {run.stderr.strip().splitlines()[-1:]}")
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    figures["process_wall_s"] = time.monotonic() - started
    figures["nvcc_phases_s"] = nvcc_phases(timing)
    figures["nvcc_time_csv"] = timing.read_text() if timing.exists() else None  # the raw report, as nvcc wrote it
    return figures


def nvcc_phases(path: Path) -> dict[str, float]:
    """nvcc --time's CSV, seconds by phase name (a row a phase, its time in `metric`, in `unit`); a phase that
    runs twice (the two preprocessing passes have names of their own) adds up."""
    phases: dict[str, float] = {}
    if not path.exists():
        return phases
    with path.open() as handle:
        for raw in csv.DictReader(handle, skipinitialspace=True):
            row = {(key or "").strip(): (value or "").strip() for key, value in raw.items()}
            try:
                seconds = float(row.get("metric") or "") * SECONDS_PER_UNIT[row.get("unit", "ms")]
            except (KeyError, ValueError):
                continue
            name = row.get("phase name", "")
            phases[name] = phases.get(name, 0.0) + seconds
    return phases


def host_command(build_dir: Path) -> list[str]:
    """The flags the build gave the host compiler for a `.cpp` (build.ninja's cflags), as one g++ command."""
    text = (build_dir / "build.ninja").read_text()
    flags = {}
    for name in ("cflags", "post_cflags"):
        match = re.search(rf"^{name} = (.*)$", text, re.MULTILINE)
        flags[name] = shlex.split(match.group(1)) if match else []
    return ["c++", *flags["cflags"], *flags["post_cflags"]]


def timed(command: list[str]) -> float:
    started = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed: {run.stderr.strip()[-400:]}")
    return time.monotonic() - started


def host_figures(build_dir: Path, work: Path) -> dict[str, float]:
    base = host_command(build_dir)
    headers = work / "headers.cpp"
    headers.write_text("#include <torch/extension.h>\n")
    binding = work / "binding.cpp"
    binding.write_text(BINDING)
    figures = {
        "g++ -O3: <torch/extension.h> alone s": timed([*base, "-c", str(headers), "-o", str(work / "h.o")]),
        "g++ -O3: the pybind11 binding of forward s": timed([*base, "-c", str(binding), "-o", str(work / "b.o")]),
    }
    pch_dir = work / "pch"
    pch_dir.mkdir()
    header = pch_dir / "ka_torch.h"
    header.write_text("#include <torch/extension.h>\n")
    figures["g++ -O3: precompiling <torch/extension.h> s"] = timed([*base, "-x", "c++-header", str(header),
                                                                     "-o", str(header) + ".gch"])  # fmt: skip
    with_pch = work / "binding_pch.cpp"
    with_pch.write_text('#include "ka_torch.h"\n' + BINDING)
    figures["g++ -O3: the binding against the precompiled header s"] = timed(
        [*base, "-I", str(pch_dir), "-Winvalid-pch", "-c", str(with_pch), "-o", str(work / "bp.o")]
    )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", type=Path, default=DEFAULT_CANDIDATE)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--headers", default="full", help="comma-separated: full (as written), light, lean")
    parser.add_argument("--no-host", action="store_true", help="skip the host compiler's figures")
    parser.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    if not args.candidate.is_file():
        print(f"no such candidate: {args.candidate}", file=sys.stderr)
        return 2
    header_sets = [name.strip() for name in args.headers.split(",") if name.strip()]
    if not header_sets or set(header_sets) - {"full", "light", "lean"}:
        print(f"--headers takes full, light and lean, not {args.headers!r}", file=sys.stderr)
        return 2
    text = args.candidate.read_text()
    if set(header_sets) - {"full"} and FULL_HEADER not in text:
        print(f"{args.candidate} does not include <torch/extension.h>: no light or lean variant", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="ka-probe-build-"))
    report: dict = {"candidate": str(args.candidate.relative_to(ROOT)), "cores": len(os.sched_getaffinity(0))}
    variants = {"full": text, "light": text.replace(FULL_HEADER, LIGHT_HEADERS),
                "lean": text.replace(FULL_HEADER, f'#include "{LEAN_NAME}"')}  # fmt: skip
    for header_set in header_sets:
        beside = {LEAN_NAME: lean_header()} if header_set == "lean" else {}
        report[header_set] = probe_header_set(variants[header_set], work / header_set, args.parallel, header_set,
                                              beside)  # fmt: skip
    if not args.no_host:
        report["host"] = host_figures(work / header_sets[0] / "alone", work)
        for name, value in report["host"].items():
            print(f"{name:60s} {value:7.2f}", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "build-phases.json").write_text(json.dumps(report, indent=1))
    return 0


def probe_header_set(text: str, work: Path, parallel: int, label: str, beside: dict[str, str]) -> dict:
    """One build alone, then `parallel` at once, of `text` (a variant comment each: nothing served from a cache),
    with the files `beside` (name: text) in the sources' folder."""
    work.mkdir(parents=True)
    for name, content in beside.items():
        (work / name).write_text(content)
    sources = []
    for index in range(parallel + 1):
        path = work / f"candidate_{index}.cu"
        path.write_text(text + f"\n// probe variant {os.getpid()}-{label}-{index}\n")
        sources.append(path)
    figures: dict = {"alone": build_once(sources[0], work, "alone")}
    print(f"{label}, alone:", json.dumps({k: v for k, v in figures["alone"].items() if k != "nvcc_time_csv"},
                                         indent=1), flush=True)  # fmt: skip
    if parallel < 1:
        return figures
    with ThreadPoolExecutor(parallel) as pool:
        together = list(pool.map(lambda i: build_once(sources[i], work, f"together-{i}"), range(1, parallel + 1)))
    figures["together"] = together
    walls = sorted(f["wall_s"] for f in together)
    print(f"{label}, {parallel} at once: wall {walls[0]:.1f}-{walls[-1]:.1f} s, core-s "
          f"{sum(f['core_s'] for f in together) / len(together):.1f} a build", flush=True)  # fmt: skip
    phases: dict[str, float] = {}
    for one in together:
        for name, value in one["nvcc_phases_s"].items():
            phases[name] = phases.get(name, 0.0) + value / len(together)
    print(f"{label}, nvcc phases at once (mean):", json.dumps({k: round(v, 2) for k, v in phases.items()}), flush=True)
    return figures


if __name__ == "__main__":
    sys.exit(main())
