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

# The version .venv holds of package $1, or exit 2 with $2 as the way to install it.
venv_version() {
  local version
  version=$(.venv/bin/python -m pip show "$1" 2>/dev/null | awk '/^Version:/{print $2}')
  [ -n "$version" ] || { echo "fetch_carry: $1 is not in .venv ($2)" >&2; exit 2; }
  echo "$version"
}

packages=(duckdb jsonschema jsonschema-specifications referencing rpds-py tenacity datasets dill multiprocess)
pins=()
for name in "${packages[@]}"; do
  pins+=("$name==$(venv_version "$name" "run 'make setup' first")")
done
mkdir -p .whl .deb
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$tag")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
  "${platforms[@]}" -d .whl "${pins[@]}"
(cd .deb && apt-get download -q bubblewrap)

# Wheel $1 (pinned to $2) unpacked, the paths after $3 removed from it, and xz-compressed into the archive $3.
trimmed_archive() {
  local name=$1 pin=$2 archive=$3 scratch
  shift 3
  scratch=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
    "${platforms[@]}" -d "$scratch" "$name==$pin"
  mkdir -p "$scratch/site" "$(dirname "$archive")"
  # unzip, not Python's zipfile: it keeps the executable bits (Ray's raylet and GCS server, clang-tidy)
  unzip -q "$scratch"/*.whl -d "$scratch/site"
  (cd "$scratch/site" && rm -rf "$@")
  tar -C "$scratch/site" -cJf "$archive" .
  rm -rf "$scratch"
}

if [ "${WITH_RAY:-0}" = 1 ]; then
  ray_version=$(venv_version ray "pip install -e '.[ray]'")
  trimmed_archive ray "$ray_version" ".ray/ray-$ray_version-core.tar.xz" \
    ray/jars ray/dashboard/client/build ray/rllib ray/serve ray/tune ray/train ray/llm ray/data
fi
if [ "${WITH_CLANG_TIDY:-0}" = 1 ]; then
  tidy_version=$(venv_version clang-tidy "run 'make setup' first")
  trimmed_archive clang-tidy "$tidy_version" ".tidy/clang-tidy-$tidy_version.tar.xz" \
    clang_tidy/data/bin/clang-apply-replacements
fi
ls .whl .deb $([ "${WITH_RAY:-0}" = 1 ] && echo .ray) $([ "${WITH_CLANG_TIDY:-0}" = 1 ] && echo .tidy)
