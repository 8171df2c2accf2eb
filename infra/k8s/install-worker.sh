#!/usr/bin/env bash
# Install the Kubernetes worker's own environment (default .venv-worker in the repository root): prefect 3.9.1 and
# prefect-kubernetes 0.8.0, no vLLM, no project code. Why it is separate: infra/k8s/requirements-worker.txt.
#
#   bash infra/k8s/install-worker.sh         # idempotent: a second run with unchanged pins does nothing
#   DR_WORKER_VENV=/path/to/venv bash infra/k8s/install-worker.sh
#   .venv-worker/bin/prefect worker start --pool dr-gpu --type kubernetes      # infra/k8s/README.md
#
# infra/install.sh calls this, so CI has the environment that tests/test_k8s_work_pool.py renders Jobs with.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${DR_WORKER_VENV:-$root/.venv-worker}"
req="$root/infra/k8s/requirements-worker.txt"
python="${PYTHON:-python3.11}"

if [ ! -x "$venv/bin/python" ]; then
  echo "[install-worker] creating virtual environment $venv"
  "$python" -m venv "$venv"
fi
stamp="$venv/.dr-worker-stamp"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[install-worker] $venv is up to date"
  exit 0
fi
echo "[install-worker] installing the pinned worker environment (about half a minute the first time)"
# --require-hashes: every pin carries the sha256 of its files (written by infra/pin_hashes.py); a file whose bytes
# are not one of them (tampered with, substituted) fails here with pip's "THESE PACKAGES DO NOT MATCH THE HASHES".
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r "$req" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# --no-deps trusts the list to be a complete resolution: pip check proves it is.
"$venv/bin/python" -m pip check --disable-pip-version-check >/dev/null
"$venv/bin/python" -c "import prefect_kubernetes.worker, kubernetes_asyncio.client" >/dev/null
echo "$want" > "$stamp"
echo "[install-worker] done: $venv"
