"""What a compile child's two ways save: forked from the build zygote against exec'd (compile/build_child.py),
nvcc's front ends side by side against in series (child/nvcc_side_by_side.py), and nvcc in series without torch's
dependency file against with it (config.NVCC_DEPENDENCY_FILE).

Builds distinct copies of one bundled candidate through the builder's own `build_extension` (the header ladder, the
sandbox, an empty cache), one at a time, alternating the two ways of what `--vary` names (the other as the config
has it), and prints each build's wall and CPU seconds (the compile child's own and its compilers'). Run it on an
otherwise idle machine:

    python benchmarks/probe_build_fork.py [--vary fork|nvcc|depfile] [--candidate PATH] [--builds 2] [--backend cuda] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder import config  # noqa: E402
from builder.verify.compile import build_child  # noqa: E402
from builder.verify.compile.extension import build_extension, device_compile_env  # noqa: E402

DEFAULT_CANDIDATE = ROOT / "data/candidates/cuda/level1/10_conv2d_strided_asymmetric/naive_direct.cu"


# --vary: the config constant it sets, and the name of each way (False, True)
WAYS = {"fork": ("FORK_COMPILE_CHILDREN", ("exec'd", "forked")),
        "nvcc": ("NVCC_FRONT_ENDS_SIDE_BY_SIDE", ("in series", "side by side")),
        "depfile": ("NVCC_DEPENDENCY_FILE", ("no dependency file", "dependency file"))}  # fmt: skip
# what each --vary holds fixed: a dependency file only counts where nvcc runs in series
FIXED = {"depfile": {"NVCC_FRONT_ENDS_SIDE_BY_SIDE": False}}


def build(source: str, backend: str, cache: Path, vary: str, on: bool) -> dict:
    setting, names = WAYS[vary]
    for name, value in FIXED.get(vary, {}).items():
        setattr(config, name, value)
    setattr(config, setting, on)
    started = time.monotonic()
    result = build_extension(source, "cuda" if backend == "cuda" else "cpp", backend, cache_dir=cache, timeout_s=600)
    if not result.ok:
        raise SystemExit(f"the build failed: {(result.error or '').splitlines()[:3]}")
    return {"way": names[on], "wall_s": round(time.monotonic() - started, 2), "cpu_s": round(result.cpu_s, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vary", default="fork", choices=sorted(WAYS), help="what the builds alternate (default fork)")
    parser.add_argument("--candidate", type=Path, default=DEFAULT_CANDIDATE)
    parser.add_argument("--builds", type=int, default=2, help="builds each way")
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    if not args.candidate.is_file():
        print(f"no such candidate: {args.candidate}", file=sys.stderr)
        return 2
    if args.vary in ("nvcc", "depfile") and args.backend != "cuda":
        print(f"--vary {args.vary}: on the cuda backend (a CPU build runs no nvcc)", file=sys.stderr)
        return 2
    text = args.candidate.read_text()
    cache = Path(tempfile.mkdtemp(prefix="ka-probe-fork-"))
    env = device_compile_env(args.backend)
    rows = []
    with build_child.held_build_zygote(env, None):
        started = time.monotonic()
        while build_child.forks(None) and not build_child.zygote_is_up(env):
            if time.monotonic() - started > config.ZYGOTE_START_TIMEOUT_S:
                raise SystemExit("the build zygote did not start")
            time.sleep(0.1)
        print(f"build zygote up after {time.monotonic() - started:.1f} s (forking: {build_child.forks(None)})")
        for number in range(2 * args.builds):
            source = text + f"\n// probe {os.getpid()} {number}\n"
            rows.append(build(source, args.backend, cache, args.vary, on=number % 2 == 1))
            print(json.dumps(rows[-1]), flush=True)
    summary = {}
    for way in WAYS[args.vary][1]:
        mine = [row for row in rows if row["way"] == way]
        summary[way] = {
            "wall_s": statistics.median(row["wall_s"] for row in mine),
            "cpu_s": statistics.median(row["cpu_s"] for row in mine),
        }
    print("medians:", json.dumps(summary))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"build-{args.vary}.json").write_text(json.dumps({"builds": rows, "medians": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
