#!/usr/bin/env bash
# Install the verifiers environment (default .venv-verifiers in the repository root): verifiers 0.4.0 (the project's
# `verifiers` extra), the project itself and the example environment dr-rubric-env (examples/verifiers_env), all
# editable. Why it is separate from .venv: infra/verifiers/requirements.txt. tests/integration/test_verifiers_env.py
# evaluates the example environment with it against a real `dr serve`.
#
#   bash infra/verifiers/install.sh          # idempotent: a second run with unchanged pins does nothing
#   DR_VERIFIERS_VENV=/path/to/venv bash infra/verifiers/install.sh
#
# infra/install.sh calls this.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${DR_VERIFIERS_VENV:-$root/.venv-verifiers}"
req="$root/infra/verifiers/requirements.txt"
python="${PYTHON:-python3.11}"

if [ ! -x "$venv/bin/python" ]; then
  echo "[install-verifiers] creating virtual environment $venv"
  "$python" -m venv "$venv"
fi
stamp="$venv/.dr-verifiers-stamp"
want="$(cat "$req" "$root/pyproject.toml" "$root/examples/verifiers_env/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[install-verifiers] $venv is up to date"
  exit 0
fi
echo "[install-verifiers] installing verifiers 0.4.0 and its pinned dependencies (about two minutes the first time)"
# --require-hashes: every pin carries the sha256 of its files (written by infra/pin_hashes.py); a file whose bytes
# are not one of them (tampered with, substituted) fails here with pip's "THESE PACKAGES DO NOT MATCH THE HASHES".
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r "$req" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
  -e "$root" -e "$root/examples/verifiers_env" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# --no-deps trusts the list to be a complete resolution: pip check proves it is.
"$venv/bin/python" -m pip check --disable-pip-version-check >/dev/null
(cd / && "$venv/bin/python" -c "import verifiers.v1, dr_rubric_env, dr_core.integrations.verifiers") >/dev/null
echo "$want" > "$stamp"
echo "[install-verifiers] done: $venv"
