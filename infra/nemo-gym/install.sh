#!/usr/bin/env bash
# Install NeMo Gym's own environment (default .venv-nemo-gym in the repository root): nemo-gym 0.4.0 on Python 3.12,
# no project code. Why it is separate: infra/nemo-gym/requirements.txt. tests/integration/test_nemo_gym_verify.py
# builds its /verify requests with this environment's nemo-gym models.
#
#   bash infra/nemo-gym/install.sh          # idempotent: a second run with unchanged pins does nothing
#   DR_NEMO_GYM_VENV=/path/to/venv PYTHON312=/path/to/python3.12 bash infra/nemo-gym/install.sh
#
# Python 3.12: $PYTHON312, else python3.12 on the PATH, else pyenv's newest 3.12 (the first that runs).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/infra/venv-lib.sh"
tag=install-nemo-gym
venv="${DR_NEMO_GYM_VENV:-$root/.venv-nemo-gym}"
req="$root/infra/nemo-gym/requirements.txt"

is_python312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; }
find_python312() {  # a pyenv shim named python3.12 may be on the PATH and refuse to run: each candidate is tried
  local p
  for p in "${PYTHON312:-}" "$(command -v python3.12 || true)" \
    $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -rV); do
    if [ -n "$p" ] && is_python312 "$p"; then echo "$p"; return; fi
  done
  echo "[$tag] error: no working Python 3.12 (nemo-gym needs >= 3.12): set PYTHON312=/path/to/python3.12" >&2
  exit 2
}

if [ ! -x "$venv/bin/python" ]; then
  python="$(find_python312)"  # an assignment, so its exit 2 stops the script (set -e); looked for only when needed
  venv_create "$tag" "$venv" "$python"
fi
want="$(sha256sum "$req" | cut -d' ' -f1)"
venv_up_to_date "$tag" "$venv" "$venv/.dr-nemo-gym-stamp"
echo "[$tag] installing the pinned NeMo Gym environment (about a minute the first time)"
pip_pinned "$venv" "$req"
pip_complete "$venv"
"$venv/bin/python" -c "import nemo_gym.base_resources_server, nemo_gym.openai_utils" >/dev/null
venv_stamp "$tag" "$venv" "$venv/.dr-nemo-gym-stamp"
