"""nvcc's front ends side by side (`child/nvcc_side_by_side.py`): against a stand-in nvcc whose steps prove what ran
at once and in which order, then against the real nvcc where one is installed (no GPU needed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.verify.child import nvcc_side_by_side

SCRIPT = Path(nvcc_side_by_side.__file__)

# Each stand-in tool says it started, and the two front ends each wait for the other to start: run one after the
# other, the first would wait in vain and fail. A tool's exit status comes from FAKE_<TOOL>_STATUS.
FAKE_TOOL = r"""#!/bin/sh
tool=$(basename "$0")
key=$(echo "$tool" | tr -d '+' | tr 'a-z' 'A-Z')
echo "$tool $*" >> "$FAKE_DIR/order"
case "$tool" in
  cudafe++|cicc)
    [ -s "$FAKE_MODULE_ID" ] || { echo "$tool: no module id" >&2; exit 7; }
    cat "$FAKE_MODULE_ID" > "$FAKE_DIR/$tool.module_id"
    touch "$FAKE_DIR/$tool.started"
    other=cicc; [ "$tool" = cicc ] && other=cudafe++
    i=0
    while [ ! -e "$FAKE_DIR/$other.started" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    [ -e "$FAKE_DIR/$other.started" ] || { echo "$tool: ran alone" >&2; exit 8; }
    ;;
esac
echo "$tool says something on stdout"
echo "$tool warns on stderr" >&2
eval "pause=\${FAKE_${key}_SLEEP:-0}"
[ "$pause" = 0 ] || exec sleep "$pause"  # one process, as a real tool is
eval "status=\${FAKE_${key}_STATUS:-0}"
[ "$status" = kill ] && kill -9 $$
exit "$status"
"""


def fake_listing(bin_dir: Path, scratch: Path, source: Path, *, archs: int = 1, extra: str = "") -> str:
    module_id = scratch / "tmpxft_1-4_k.module_id"
    lines = [
        "_NVVM_BRANCH_=nvvm",
        "_SPACE_= ",
        f"PATH={bin_dir}:/usr/bin:/bin",
        'INCLUDES="-I/somewhere/include"  ',
        f'gcc -D__CUDA_ARCH_LIST__=900 -E -x c++ "{source}" -o "{scratch}/k.cpp4.ii"',
        f'cudafe++ --orig_src_file_name "k.cu" --orig_src_path_name "{source}" --gen_c_file_name "{scratch}/k.cpp"'
        f' --gen_module_id_file --module_id_file_name "{module_id}" "{scratch}/k.cpp4.ii"',
    ]
    for arch in range(archs):
        lines += [
            f'gcc -D__CUDA_ARCH__=90{arch} -E -x c++ "{source}" -o "{scratch}/k.cpp1.ii"',
            f'"$CICC_PATH/cicc" --module_id_file_name "{module_id}" "{scratch}/k.cpp1.ii" -o "{scratch}/k.ptx"',
            f'ptxas -arch=sm_90 "{scratch}/k.ptx" -o "{scratch}/k.cubin"',
        ]
    lines += [
        f'fatbinary -64 "--image3=kind=elf,sm=90,file={scratch}/k.cubin" --embedded-fatbin="{scratch}/k.fatbin.c"',
        f"rm {scratch}/k.fatbin",
        *([extra] if extra else []),
        f'gcc -D__CUDA_ARCH__=900 -c -x c++ "{scratch}/k.cpp" -o "k.o"',
    ]
    return "".join(f"#$ {line}\n" for line in lines)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A stand-in nvcc: `--dryrun` prints the listing in $FAKE_DIR/listing; run for real, it notes its arguments."""
    bin_dir, scratch = tmp_path / "bin", tmp_path / "scratch"
    bin_dir.mkdir()
    scratch.mkdir()
    for tool in ("gcc", "cudafe++", "cicc", "ptxas", "fatbinary"):
        (bin_dir / tool).write_text(FAKE_TOOL)
        (bin_dir / tool).chmod(0o755)
    nvcc = tmp_path / "nvcc"
    nvcc.write_text('#!/bin/sh\nif [ "$1" = --dryrun ]; then cat "$FAKE_DIR/listing" >&2; exit "${FAKE_DRYRUN_STATUS:-0}"; fi\n'
                    'echo "nvcc ran: $*" > "$FAKE_DIR/nvcc-ran"\n')  # fmt: skip
    nvcc.chmod(0o755)
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k() {}\n")
    (tmp_path / "listing").write_text(fake_listing(bin_dir, scratch, source))
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    monkeypatch.setenv("FAKE_MODULE_ID", str(scratch / "tmpxft_1-4_k.module_id"))
    monkeypatch.setenv("CICC_PATH", str(bin_dir))
    monkeypatch.setenv(nvcc_side_by_side.REAL_NVCC_VARIABLE, str(nvcc))
    return tmp_path


def run(
    tmp_path: Path, *arguments: str, sleeps: dict[str, int] | None = None, **statuses: str
) -> subprocess.CompletedProcess:
    env = {**os.environ, **{f"FAKE_{tool.upper()}_STATUS": status for tool, status in statuses.items()},
           **{f"FAKE_{tool.upper()}_SLEEP": str(seconds) for tool, seconds in (sleeps or {}).items()}}  # fmt: skip
    return subprocess.run([sys.executable, "-I", str(SCRIPT), *(arguments or ("-c", "k.cu", "-o", "k.o"))],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip


def order(tmp_path: Path) -> list[str]:
    return [line.split()[0] for line in (tmp_path / "order").read_text().splitlines()]


def test_the_front_ends_run_at_once_on_one_module_id_and_the_host_compiler_after_both(fake):
    done = run(fake)
    assert done.returncode == 0, done.stderr
    ran = order(fake)
    assert sorted(ran[:-1]) == ["cicc", "cudafe++", "fatbinary", "gcc", "gcc", "ptxas"] and ran[-1] == "gcc"
    assert "-c" in (fake / "order").read_text().splitlines()[-1].split()
    module_id = (fake / "cudafe++.module_id").read_text()
    assert module_id == (fake / "cicc.module_id").read_text()
    assert re.fullmatch(r"_[0-9a-f]{8}_4_k_cu_[0-9a-f]{8}", module_id)
    # cudafe++ reads the id it was given rather than making its own
    assert (
        "--gen_module_id_file"
        not in [line for line in (fake / "order").read_text().splitlines() if "cudafe" in line][0]
    )
    # what the steps printed, in nvcc's order: host preprocessing, cudafe++, device preprocessing, cicc, ...
    assert [line.split()[0] for line in done.stderr.splitlines()] == [
        "gcc", "cudafe++", "gcc", "cicc", "ptxas", "fatbinary", "gcc"]  # fmt: skip
    assert done.stdout.count("says something on stdout") == 7
    assert not (fake / "nvcc-ran").exists()


def test_the_host_front_ends_failure_is_the_one_nvcc_would_have_shown(fake):
    done = run(fake, cudafe="2", cicc="1")
    assert done.returncode == 2
    assert [line.split()[0] for line in done.stderr.splitlines()] == ["gcc", "cudafe++"]
    assert "cicc" not in done.stdout


def test_a_host_front_end_failure_ends_the_device_chain_at_once_as_nvcc_would_never_have_started_it(fake):
    done = run(fake, cudafe="2", sleeps={"cicc": 300})  # run() gives up after 60 s: cicc is ended, not waited for
    assert done.returncode == 2 and "cicc" in order(fake)


def test_a_device_front_end_failure_after_a_good_host_front_end_stops_before_the_host_compiler(fake):
    done = run(fake, cicc="1")
    assert done.returncode == 1
    assert [line.split()[0] for line in done.stderr.splitlines()] == ["gcc", "cudafe++", "gcc", "cicc"]
    assert order(fake).count("gcc") == 2  # no host compile


def test_a_step_a_signal_ended_is_named_as_the_machinerys_failure(fake):
    done = run(fake, cicc="kill")
    assert done.returncode == 128 + 9  # its shell's status, as nvcc returns it
    assert "ka-compiler: cicc killed by signal 9" in done.stderr
    from builder.verify.sandbox.suspects import suspect_text

    assert suspect_text(done.stderr).startswith("the compiler was killed by a signal")


@pytest.mark.parametrize(
    "listing",
    [
        pytest.param(lambda fake: fake_listing(fake / "bin", fake / "scratch", fake / "k.cu", archs=2), id="two-archs"),
        pytest.param(
            lambda fake: fake_listing(fake / "bin", fake / "scratch", fake / "k.cu", extra="nvlink --arch=sm_90 x.o"),
            id="a-step-it-does-not-know",
        ),  # fmt: skip
        pytest.param(
            lambda fake: (
                "#$ -- Filter Dependencies -- > k.o.d\n" + fake_listing(fake / "bin", fake / "scratch", fake / "k.cu")
            ),
            id="dependency-file",
        ),  # fmt: skip
    ],
)
def test_any_other_plan_is_nvccs_own_run_with_the_same_arguments(fake, listing):
    (fake / "listing").write_text(listing(fake))
    done = run(fake, "-c", "k.cu", "-o", "k.o", "-rdc=true")
    assert done.returncode == 0, done.stderr
    assert (fake / "nvcc-ran").read_text().strip() == "nvcc ran: -c k.cu -o k.o -rdc=true"
    assert not (fake / "order").exists()


def test_a_dryrun_that_fails_leaves_the_build_to_nvcc(fake, monkeypatch):
    monkeypatch.setenv("FAKE_DRYRUN_STATUS", "1")
    done = run(fake)
    assert done.returncode == 0 and (fake / "nvcc-ran").exists()


def test_no_nvcc_is_one_line_a_shell_would_print(fake, monkeypatch):
    monkeypatch.setenv(nvcc_side_by_side.REAL_NVCC_VARIABLE, str(fake / "no-such-nvcc"))
    done = run(fake)
    assert done.returncode == 127
    assert done.stderr.strip() == f"{fake / 'no-such-nvcc'}: not found"
    from builder.verify.sandbox.suspects import suspect_text

    assert suspect_text(done.stderr).startswith("a compiler or build tool is missing")


def test_the_module_id_depends_on_the_build_alone():
    one = nvcc_side_by_side.module_id_for("/b/k.cu", b"text", ["-O3"])
    assert one == nvcc_side_by_side.module_id_for("/b/k.cu", b"text", ["-O3"])
    assert one != nvcc_side_by_side.module_id_for("/b/k.cu", b"text2", ["-O3"])
    assert one != nvcc_side_by_side.module_id_for("/b/k.cu", b"text", ["-O2"])
    assert "_8_ka_0f_cu_" in nvcc_side_by_side.module_id_for("/a/ka_0f.cu", b"", [])


# --- the real nvcc --------------------------------------------------------------------------------------------------

REAL_NVCC = shutil.which("nvcc") or next((str(p) for p in [Path("/usr/local/cuda/bin/nvcc")] if p.is_file()), None)
needs_nvcc = pytest.mark.skipif(REAL_NVCC is None, reason="no nvcc here")

KERNEL = r"""
#include <cstdio>
namespace {
__device__ float scale_of(int i) { return 0.5f * i; }
}
__device__ float bias = 1.0f;
template <typename T> __global__ void scaled(T* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * scale_of(i) + bias;
}
void launch(float* x, int n) { scaled<float><<<(n + 255) / 256, 256>>>(x, n); }
"""
ARGUMENTS = ["-gencode=arch=compute_90,code=sm_90", "-O3", "-std=c++17", "--compiler-options", "-fPIC", "-c", "k.cu"]


def normalized(text: str, *module_ids: str) -> str:
    """`text` without the names a build gives itself: its module id (in a mangled name, after its length) and the
    name of nvcc's scratch file (`_GLOBAL__sub_I_<file>`)."""
    for module_id in module_ids:
        text = re.sub(rf"\d+(_GLOBAL__N_|_INTERNAL_){re.escape(module_id)}", r"<n>\1<id>", text)
        text = text.replace(module_id, "<id>")
    return re.sub(r"\w+\.cudafe1\.cpp", "<file>", text)


def compile_both(tmp_path: Path, source: str) -> tuple:
    """(nvcc's run, this one's, the module id of each) of `ARGUMENTS` on `source`: nvcc keeps its scratch files,
    whose module id the comparison needs."""
    (tmp_path / "k.cu").write_text(source)
    (tmp_path / "kept").mkdir()
    env = {**os.environ, nvcc_side_by_side.REAL_NVCC_VARIABLE: REAL_NVCC}
    plain = subprocess.run([REAL_NVCC, "--keep", "--keep-dir", "kept", *ARGUMENTS, "-o", "plain.o"], cwd=tmp_path,
                           capture_output=True, text=True)  # fmt: skip
    side = subprocess.run([sys.executable, "-I", str(SCRIPT), *ARGUMENTS, "-o", "side.o"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)  # fmt: skip
    kept = list((tmp_path / "kept").glob("*.module_id"))
    ids = [kept[0].read_text().strip()] if kept else []
    ids.append(nvcc_side_by_side.module_id_for(str(tmp_path / "k.cu"), source.encode(), [*ARGUMENTS, "-o", "side.o"]))
    return plain, side, ids


@needs_nvcc
def test_with_the_real_nvcc_the_object_is_nvccs_but_for_the_names_it_gives_per_build(tmp_path):
    plain, side, ids = compile_both(tmp_path, KERNEL)
    assert plain.returncode == side.returncode == 0, side.stderr
    assert plain.stdout == side.stdout and plain.stderr == side.stderr
    assert len(ids) == 2 and ids[0] != ids[1]

    def listing(tool: str, *options: str) -> list[str]:
        found = shutil.which(tool, path=str(Path(REAL_NVCC).parent)) or shutil.which(tool)
        if found is None:
            return [f"no {tool} here"] * 2
        outputs = [subprocess.run([found, *options, obj], cwd=tmp_path, capture_output=True, text=True, check=True)
                   for obj in ("plain.o", "side.o")]  # fmt: skip
        return [normalized(output.stdout.replace("plain.o", "").replace("side.o", ""), *ids) for output in outputs]

    symbols = listing("nm", "-p", "--defined-only")  # in the symbol table's order, not by name
    assert symbols[0] == symbols[1] and "scaled" in symbols[0] and "<id>" in symbols[0]
    sections = listing("objdump", "-h")
    assert sections[0] == sections[1]
    host_code = listing("objdump", "-d", "--section=.text")
    assert host_code[0] == host_code[1]
    device_code = listing("cuobjdump", "-sass")  # a toolkit without it (a CPU machine's) compares the host's alone
    assert device_code[0] == device_code[1] and ("scaled" in device_code[0] or device_code[0] == "no cuobjdump here")


@needs_nvcc
@pytest.mark.parametrize(
    "source",
    [
        pytest.param("__global__ void f(float* x) { x[0] = undeclared_thing; }\n", id="an-undeclared-name"),
        pytest.param('__global__ void f(float* x) { x[0] = 1; }\nvoid g() { int y = "s"; }\n', id="host-only"),
        pytest.param("__device__ void h() { throw 1; }\n__global__ void f() { h(); }\n", id="device-only"),
        pytest.param("#include <no_such_header.h>\n__global__ void f() {}\n", id="a-missing-header"),
    ],
)
def test_with_the_real_nvcc_a_compile_error_reads_and_ends_as_nvccs(tmp_path, source):
    plain, side, _ = compile_both(tmp_path, source)
    assert plain.returncode != 0
    assert (side.returncode, side.stdout, side.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert not (tmp_path / "side.o").exists()
