#!/usr/bin/env bash
# The two commands of the README, for a fresh Debian 12 machine:
#   tools/bootstrap.sh demo   install what is missing, build, run the demo
#   tools/bootstrap.sh test   install what is missing, build, run every test (plain and ASan+UBSan)
# Builds land in build/ (binaries in build/bin/) and build-asan/. ccache is used when present.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly PACKAGES=(
  build-essential cmake ccache git
  libcaf-dev libucx-dev libboost-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
  protobuf-compiler libprotobuf-dev python3-protobuf python3-numpy python3-pytest python3-venv python3-pip
  python3-setuptools clang libclang-rt-14-dev iproute2
)

log() { printf '\n== %s\n' "$*"; }

install_missing() {
  local missing=() pkg
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]}"
  local sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

jobs() { nproc 2>/dev/null || echo 2; }

# configure_and_build DIR [cmake args...]
configure_and_build() {
  local dir=$1
  shift
  local args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
  if command -v ccache >/dev/null; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  # The CUDA toolkit lives in /usr/local/cuda; CUDA sources are compiled whenever nvcc exists.
  if [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
  log "building $dir"
  cmake -S . -B "$dir" "${args[@]}" "$@" >/dev/null
  cmake --build "$dir" -j"$(jobs)"
}

# The NCCL transport is compiled (it cannot run without a GPU) wherever nvcc and NCCL exist; GPU
# bundles (tools/gpu-run.sh) leave it out, since they would carry libnccl.
nccl_flags() {
  if [[ -x ${CUDACXX:-/usr/local/cuda/bin/nvcc} && -f /usr/local/cuda/include/nccl.h ]]; then
    echo -DDISTSAMPLE_WITH_NCCL=ON
  fi
}

run_tests() {
  local dir=$1
  log "testing $dir"
  ctest --test-dir "$dir" --output-on-failure --timeout 600 -j"$(jobs)"
}

case "${1:-}" in
  demo)
    install_missing
    configure_and_build build
    log "distsample demo"
    ./build/bin/distsample demo
    ;;
  test)
    install_missing
    # shellcheck disable=SC2046
    configure_and_build build $(nccl_flags)
    run_tests build
    # The sanitizer build skips CUDA: sanitizers only instrument host code, and nvcc is slow here.
    configure_and_build build-asan -DDISTSAMPLE_SANITIZE=ON -DDISTSAMPLE_WITH_CUDA=OFF
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 run_tests build-asan
    ;;
  *)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
