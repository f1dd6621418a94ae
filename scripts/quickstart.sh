#!/usr/bin/env bash
# The main job: set up (if needed), then compile ResNet-50 and DistilBERT with
# torch.compile(backend="dnnfusion") and print their error against eager and their latency.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DNNFUSION_VENV:-$HOME/.venvs/dnnfusion}"
bash "$ROOT/scripts/setup.sh"
exec "$VENV/bin/python" "$ROOT/examples/quickstart.py" "$@"
