#!/usr/bin/env bash
# Source this on a GPU box without a package registry: installs the carried wheels (.whl/) and
# unpacks Debian's bubblewrap (.deb/) outside /tmp (the sandbox gives children a private /tmp), then puts the
# repository on PYTHONPATH so `python3 -m builder` is the kernel-archive CLI.
# `benchmarks/device/fetch_carry.sh` fetches both on a machine with a package registry, with WITH_RAY=1 a
# trimmed Ray (.ray/) and with WITH_CLANG_TIDY=1 clang-tidy's package (.tidy/), unpacked here beside the wheels.
set -e
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /opt/ka-site .whl/*.whl
fi
for archive in .ray/*.tar.xz .tidy/*.tar.xz; do [ -e "$archive" ] && mkdir -p /opt/ka-site && tar -C /opt/ka-site -xJf "$archive"; done
for deb in .deb/*.deb; do [ -e "$deb" ] && dpkg -x "$deb" /opt/ka-deb; done
export PATH="/opt/ka-deb/usr/bin:$PATH"
export PYTHONPATH="$PWD:/opt/ka-site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
command -v bwrap >/dev/null && echo "bwrap: $(command -v bwrap)"
set +e
