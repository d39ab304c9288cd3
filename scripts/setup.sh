#!/usr/bin/env bash
# One place for set-up (idempotent): system packages, Python venv, C++ build.
# Called by `make setup`, `make test`, `make demo` and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS=(cmake ninja-build g++ pkg-config libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
          protobuf-compiler libyaml-cpp-dev libgtest-dev libgmock-dev libasio-dev iproute2)
# the netem test's VM (tests/python/test_netem_vm.py): a stock kernel with sch_netem, QEMU, its initramfs; only for
# the tests (--engine: the main job, a run, the bench -- skips them)
[[ ${1:-} == --engine ]] || APT_PKGS+=(qemu-system-x86 linux-image-amd64 busybox-static cpio dash)
PY=${PYTHON:-python3}

# 1. Debian packages: only the missing ones, only as root.
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "setup: installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "setup: warning: missing packages (${missing[*]}) and not root; install them with apt-get" >&2
  fi
fi

# 2. Python venv: the testbed package (pyproject.toml) installed editable with its test extra, every package
#    pinned by constraints.txt; reinstalled only when either file changed.
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
stamp=.venv/.pyproject.sha
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "setup: pip install -e .[test] (pyproject.toml, constraints.txt)"
  .venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
  echo "$want" > "$stamp"
fi

# 3. C++ build: every target, or with --engine only the engine's programs (the main job, a run, the bench: the unit
#    tests are about half of a fresh build; `make test` builds them).
BUILD=${BUILD_DIR:-build}
TARGETS=()
[[ ${1:-} == --engine ]] && TARGETS=(txn-server txn-client txn-replay txn-sim)
[[ -f $BUILD/build.ninja ]] || cmake -S . -B "$BUILD" -G Ninja
ninja -C "$BUILD" -j"${JOBS:-2}" "${TARGETS[@]}"
