#!/usr/bin/env bash
# Run on a machine with a package registry, in the repository root: fetches what a GPU box without one lacks
# into .whl/ (the wheels setup.sh installs: the builder's dependencies beyond a CUDA PyTorch image's, at the
# versions this checkout's .venv holds) and .deb/ (Debian's bubblewrap, for the sandbox). PYTHON_VERSION is the
# GPU box's Python (default 3.12). WITH_RAY=1 also writes .ray/ray-VERSION-core.tar.xz: Ray's wheel at .venv's
# version without what a Python-only Ray never loads (Java's jars, the dashboard's web client, and the rllib, serve,
# tune, train, llm and data libraries), xz-compressed, because the whole wheel (76 MiB) is more than a GPU box
# can be sent. WITH_CLANG_TIDY=1 also writes .tidy/clang-tidy-VERSION.tar.xz: the clang-tidy wheel's package at
# .venv's version without clang-apply-replacements, xz-compressed (28 MB against the wheel's 46 MB), so that it fits
# beside the wheels and the builds on a GPU box can run clang-tidy too.
set -euo pipefail
python_version=${PYTHON_VERSION:-3.12}
packages=(duckdb jsonschema jsonschema-specifications referencing rpds-py tenacity datasets dill multiprocess)
pins=()
for name in "${packages[@]}"; do
  version=$(.venv/bin/python -m pip show "$name" 2>/dev/null | awk '/^Version:/{print $2}')
  [ -n "$version" ] || { echo "fetch_carry: $name is not in .venv (run 'make setup' first)" >&2; exit 2; }
  pins+=("$name==$version")
done
mkdir -p .whl .deb
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$tag")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
  "${platforms[@]}" -d .whl "${pins[@]}"
(cd .deb && apt-get download -q bubblewrap)
if [ "${WITH_RAY:-0}" = 1 ]; then
  ray_version=$(.venv/bin/python -m pip show ray 2>/dev/null | awk '/^Version:/{print $2}')
  [ -n "$ray_version" ] || { echo "fetch_carry: ray is not in .venv (pip install -e '.[ray]')" >&2; exit 2; }
  scratch=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
    "${platforms[@]}" -d "$scratch" "ray==$ray_version"
  mkdir -p "$scratch/site" .ray
  # unzip, not Python's zipfile: it keeps the executable bits of Ray's raylet and GCS server
  unzip -q "$scratch"/ray-*.whl -d "$scratch/site"
  (cd "$scratch/site" && rm -rf ray/jars ray/dashboard/client/build ray/rllib ray/serve ray/tune ray/train ray/llm ray/data)
  tar -C "$scratch/site" -cJf ".ray/ray-$ray_version-core.tar.xz" .
  rm -rf "$scratch"
fi
if [ "${WITH_CLANG_TIDY:-0}" = 1 ]; then
  tidy_version=$(.venv/bin/python -m pip show clang-tidy 2>/dev/null | awk '/^Version:/{print $2}')
  [ -n "$tidy_version" ] || { echo "fetch_carry: clang-tidy is not in .venv (run 'make setup' first)" >&2; exit 2; }
  scratch=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
    "${platforms[@]}" -d "$scratch" "clang-tidy==$tidy_version"
  mkdir -p "$scratch/site" .tidy
  unzip -q "$scratch"/clang_tidy-*.whl -d "$scratch/site"
  rm -f "$scratch/site/clang_tidy/data/bin/clang-apply-replacements"
  tar -C "$scratch/site" -cJf ".tidy/clang-tidy-$tidy_version.tar.xz" .
  rm -rf "$scratch"
fi
ls .whl .deb $([ "${WITH_RAY:-0}" = 1 ] && echo .ray) $([ "${WITH_CLANG_TIDY:-0}" = 1 ] && echo .tidy)
