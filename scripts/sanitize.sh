#!/usr/bin/env bash
# Runs dnnfusion under AddressSanitizer + UndefinedBehaviorSanitizer; any finding aborts.
#   bash scripts/sanitize.sh                  # the C++ core's GoogleTest suite (build/sanitize)
#   bash scripts/sanitize.sh -R Conv          # ctest arguments pass through
#   bash scripts/sanitize.sh --python [ARGS]  # the fuzzer's end-to-end cases on a sanitized
#                                             # extension (build/sanitize-py); ARGS go to
#                                             # tests/fuzz/fuzz.py (default: --seeds 0:30)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DNNFUSION_VENV:-$HOME/.venvs/dnnfusion}"
[ -x "$VENV/bin/cmake" ] && export PATH="$VENV/bin:$PATH"
# Generated kernels are loaded with dlopen and the thread pool lives for the process: leak
# reports are not findings here.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"

if [ "${1:-}" = "--python" ]; then
  shift
  OUT="$ROOT/build/sanitize-py"
  mkdir -p "$OUT/lib"
  (cd "$ROOT" && DNNFUSION_SANITIZE=address,undefined DNNFUSION_BUILD_DIR="$OUT/cmake" \
     DNNFUSION_BUILD_TYPE=RelWithDebInfo "$VENV/bin/python" setup.py -q build_ext --build-lib "$OUT/lib")
  (cd "$ROOT" && find dnnfusion -name '*.py' -exec cp --parents {} "$OUT/lib/" \;)
  # The ASan runtime must come first in the process: python itself is not instrumented.
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
  export PYTHONPATH="$OUT/lib${PYTHONPATH:+:$PYTHONPATH}"
  [ $# -eq 0 ] && set -- --seeds 0:30
  exec "$VENV/bin/python" "$ROOT/tests/fuzz/fuzz.py" --out "$OUT/fuzz-out" "$@"
fi

cmake -S "$ROOT" -B "$ROOT/build/sanitize" -GNinja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDNNFUSION_BUILD_TESTS=ON -DDNNFUSION_SANITIZE=address,undefined >/dev/null
cmake --build "$ROOT/build/sanitize" --target dnnfusion_tests -j "$(nproc)"
cd "$ROOT/build/sanitize" && ctest --output-on-failure -j "$(nproc)" "$@"
