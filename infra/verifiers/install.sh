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
source "$root/infra/venv-lib.sh"
tag=install-verifiers
venv="${DR_VERIFIERS_VENV:-$root/.venv-verifiers}"
req="$root/infra/verifiers/requirements.txt"

venv_create "$tag" "$venv" "${PYTHON:-python3.11}"
want="$(cat "$req" "$root/pyproject.toml" "$root/examples/verifiers_env/pyproject.toml" | sha256sum | cut -d' ' -f1)"
venv_up_to_date "$tag" "$venv" "$venv/.dr-verifiers-stamp"
echo "[$tag] installing verifiers 0.4.0 and its pinned dependencies (about two minutes the first time)"
pip_pinned "$venv" "$req"
pip_editable "$venv" "$root" "$root/examples/verifiers_env"
pip_complete "$venv"
(cd / && "$venv/bin/python" -c "import verifiers.v1, dr_rubric_env, dr_core.integrations.verifiers") >/dev/null
venv_stamp "$tag" "$venv" "$venv/.dr-verifiers-stamp"
