#!/usr/bin/env bash
# One place for set-up (idempotent): system packages, Python venv, C++ build.
# Called by `make setup`, `make test`, `make demo` and .ci/run.
#   --engine      only the engine's programs (the main job, a run, the bench): not the unit tests, not the netem VM
#   --image-base  also the part of the container image that needs no engine program (docker/build_image.sh
#                 --deps-only: its Debian base, packages and venv) when Docker is here and the image is stale: built
#                 while the engine compiles, as the venv is (they mostly wait for the network)
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE=0 IMAGE_BASE=0
for a in "$@"; do
  case $a in
    --engine) ENGINE=1 ;;
    --image-base) IMAGE_BASE=1 ;;
    *) echo "setup: unknown option $a (--engine, --image-base)" >&2; exit 2 ;;
  esac
done

APT_PKGS=(cmake ninja-build g++ pkg-config libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
          protobuf-compiler libyaml-cpp-dev libgtest-dev libgmock-dev libasio-dev libgoogle-perftools-dev iproute2)
# the netem test's VM (tests/python/test_netem_vm.py): a stock kernel with sch_netem, QEMU, its initramfs; headless
# Chromium for the results page's test (tests/python/test_index.py); only for the tests (--engine: the main job, a
# run, the bench -- skips them)
((ENGINE)) || APT_PKGS+=(qemu-system-x86 linux-image-amd64 busybox-static cpio dash chromium)
PY=${PYTHON:-python3}
# the image's deps: only where Docker answers (build_image.sh does nothing when the image is current); debootstrap
# makes its base when that is missing (no registry has it) and is installed here, before the background starts
((IMAGE_BASE)) && ! docker info >/dev/null 2>&1 && IMAGE_BASE=0
((IMAGE_BASE)) && ! docker image inspect "${BASE:-debian:bookworm-slim}" >/dev/null 2>&1 && APT_PKGS+=(debootstrap)

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

# 2. In the background while 3 compiles: the Python venv -- the testbed package (pyproject.toml) installed editable
#    with its test extra, every package pinned by constraints.txt; reinstalled only when either file changed -- and
#    the image's base (--image-base). Their output goes to logs, shown when they fail.
logs=$(mktemp -d /tmp/edge-txn-setup.XXXXXX)
pip_pid="" base_pid=""
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
stamp=.venv/.pyproject.sha
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "setup: pip install -e .[test] (pyproject.toml, constraints.txt), in the background"
  (.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]' && echo "$want" > "$stamp") \
    >"$logs/pip.log" 2>&1 &
  pip_pid=$!
fi
if ((IMAGE_BASE)); then
  docker/build_image.sh --deps-only >"$logs/base.log" 2>&1 &
  base_pid=$!
fi

# 3. C++ build: every target, or with --engine only the engine's programs (the main job, a run, the bench: the unit
#    tests are about half of a fresh build; `make test` builds them).
BUILD=${BUILD_DIR:-build}
TARGETS=()
((ENGINE)) && TARGETS=(txn-server txn-client txn-replay txn-sim txn-wakecost)
status=0
{ [[ -f $BUILD/build.ninja ]] || cmake -S . -B "$BUILD" -G Ninja; } && ninja -C "$BUILD" -j"${JOBS:-2}" "${TARGETS[@]}" ||
  status=$?

# 4. The background work's outcome (waited for even when the build failed, so nothing outlives this script).
if [[ -n $pip_pid ]] && ! wait "$pip_pid"; then
  tail -n 20 "$logs/pip.log" >&2
  echo "setup: pip install failed (above)" >&2
  status=1
fi
if [[ -n $base_pid ]]; then
  if wait "$base_pid"; then
    grep -E '^build_image: (created|the image)' "$logs/base.log" || true
  else  # not fatal here: docker/build_image.sh tries again when the image is built, and stops there with the reason
    tail -n 5 "$logs/base.log" >&2
    echo "setup: warning: building the image's deps stage failed (above); docker/build_image.sh will try again" >&2
  fi
fi
rm -rf "$logs"
exit "$status"
