#!/usr/bin/env bash
# GPU runs, the same way every session (DESIGN.md §7):
#   tools/gpu-run.sh bundle [TARGET...]
#                             here: build for sm_90 into build-gpu/ and bundle the binaries (the
#                             tests and what verify runs, or only the named targets) and the
#                             shared libraries they need into .gpu-bundle/ (git-ignored)
#   tools/gpu-run.sh run      on the GPU machine (device tool, carry .gpu-bundle): run every test
#                             binary and, if given, a command; logs go to $OUT when it is set
#   tools/gpu-run.sh bench    on the GPU machine: the sampling benchmark and its PyTorch peers
#   tools/gpu-run.sh verify   on the GPU machine: everything an issue touching kernels needs, in one
#                             device call: run, compute-sanitizer memcheck and racecheck on the CUDA
#                             tests, bench, and the coordinator overhead on the machine's cores
# Example with the device tool: run(command="tools/gpu-run.sh run", carry=[".gpu-bundle"]).
set -euo pipefail
cd "$(dirname "$0")/.."
readonly BUNDLE=.gpu-bundle

bundle() {
  export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DDISTSAMPLE_WITH_CUDA=ON -DDISTSAMPLE_WITH_NCCL=ON -DDISTSAMPLE_CUDA_ARCH=90 \
    "${launcher[@]}" >/dev/null
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
  if (($# > 0)); then
    cmake --build build-gpu -j"$(nproc)" --target "$@"
    local target
    for target in "$@"; do cp "build-gpu/bin/$target" "$BUNDLE/bin/"; done
  else
    cmake --build build-gpu -j"$(nproc)"
    # What `run` and `verify` use: a call carries at most 64 MiB, and every binary holds its own
    # copy of the CUDA runtime, so the other benchmarks and the examples go only when named.
    cp build-gpu/bin/{test_*,*_peer,distsample,bench_cuda_sampling,bench_coordinator_overhead} "$BUNDLE/bin/"
  fi
  # Every shared library the binaries use except the C runtime and the CUDA driver, which the GPU
  # machine has (and must match its kernel driver), and NCCL, which comes from the GPU machine's
  # Python site-packages (use_gpu_machine_libraries): the toolkit's libnccl is 200 MB.
  local lib
  for lib in $(ldd "$BUNDLE"/bin/* 2>/dev/null | awk '/=> \//{print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libgcc_s.so*|libnccl.so*) ;;
      *) cp -L "$lib" "$BUNDLE/lib/" ;;
    esac
  done
  # Symbol tables are a third of the bytes, and a call carries at most 64 MiB.
  strip --strip-unneeded "$BUNDLE"/bin/* "$BUNDLE"/lib/*
  du -sh "$BUNDLE"
}

# On the GPU machine: the bundle's libraries, and NCCL from the nvidia-nccl Python package.
use_gpu_machine_libraries() {
  local nccl
  nccl=$(python3 -c "import nvidia.nccl,os;print(os.path.join(nvidia.nccl.__path__[0],'lib'))" 2>/dev/null || true)
  [[ -n $nccl ]] || echo "no nvidia.nccl Python package: binaries that use NCCL will not load" >&2
  export LD_LIBRARY_PATH="$PWD/$BUNDLE/lib${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

run() {
  local out=${OUT:-/tmp/gpu-run}
  mkdir -p "$out"
  use_gpu_machine_libraries
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  local failed=0 test
  for test in "$BUNDLE"/bin/test_*; do
    echo "== $(basename "$test")"
    if ! "$test" --gtest_brief=1 >"$out/$(basename "$test").log" 2>&1; then
      failed=1
      echo "FAILED: $(basename "$test")"
    fi
    tail -n 3 "$out/$(basename "$test").log"
  done
  if (($# > 0)); then
    echo "== $*"
    "$@"
  fi
  return "$failed"
}

bench() {
  local out=${OUT:-/tmp/gpu-run}
  mkdir -p "$out"
  use_gpu_machine_libraries
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  "$BUNDLE/bin/bench_cuda_sampling" --json "$out/ours.json" | tee "$out/bench.txt"
  python3 bench/peers_torch.py "$out/ours.json" | tee "$out/peers.txt"
}

sanitize() {
  local out=${OUT:-/tmp/gpu-run} tool failed=0
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool test_cuda_backend (12 random batches)"
    if ! DS_GPU_TRIALS=12 "$sanitizer" --tool "$tool" --error-exitcode 9 "$BUNDLE/bin/test_cuda_backend" --gtest_brief=1 \
        >"$out/sanitizer-$tool.log" 2>&1; then
      failed=1
      echo "FAILED: $tool"
    fi
    tail -n 2 "$out/sanitizer-$tool.log"
  done
  return "$failed"
}

verify() {
  local out=${OUT:-/tmp/gpu-run} failed=0
  mkdir -p "$out"
  run || failed=1
  sanitize || failed=1
  bench || failed=1
  echo "== coordinator overhead ($(nproc) cores)"
  "$BUNDLE/bin/bench_coordinator_overhead" >"$out/coordinator_overhead.txt" 2>&1 || failed=1
  tail -n 12 "$out/coordinator_overhead.txt"
  return "$failed"
}

case "${1:-}" in
  bundle) shift; bundle "$@" ;;
  run) shift; run "$@" ;;
  bench) bench ;;
  verify) verify ;;
  *) echo "usage: $0 bundle [target...] | run [command...] | bench | verify" >&2; exit 2 ;;
esac
