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
source "$root/infra/venv-lib.sh"
tag=install-worker
venv="${DR_WORKER_VENV:-$root/.venv-worker}"
req="$root/infra/k8s/requirements-worker.txt"

venv_create "$tag" "$venv" "${PYTHON:-python3.11}"
want="$(sha256sum "$req" | cut -d' ' -f1)"
venv_up_to_date "$tag" "$venv" "$venv/.dr-worker-stamp"
echo "[$tag] installing the pinned worker environment (about half a minute the first time)"
pip_pinned "$venv" "$req"
pip_complete "$venv"
"$venv/bin/python" -c "import prefect_kubernetes.worker, kubernetes_asyncio.client" >/dev/null
venv_stamp "$tag" "$venv" "$venv/.dr-worker-stamp"
