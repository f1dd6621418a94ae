#!/usr/bin/env bash
# Runs every test: the C++ core's GoogleTest suite (ctest) and the Python suite (pytest).
# Installs and builds whatever is missing first (scripts/setup.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DNNFUSION_VENV:-$HOME/.venvs/dnnfusion}"
bash "$ROOT/scripts/setup.sh"
export PATH="$VENV/bin:$PATH"

echo "[test] C++ core: GoogleTest via ctest"
cmake -S "$ROOT" -B "$ROOT/build/core" -GNinja -DCMAKE_BUILD_TYPE=Release -DDNNFUSION_BUILD_TESTS=ON >/dev/null
cmake --build "$ROOT/build/core" --target dnnfusion_tests -j "$(nproc)"
(cd "$ROOT/build/core" && ctest --output-on-failure -j "$(nproc)")

echo "[test] Python: pytest"
cd "$ROOT"
"$VENV/bin/python" -m pytest tests/python -v -s --durations=15 "$@"
