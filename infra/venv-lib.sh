# The four installers' shared steps (sourced, not run): one virtual environment per pinned requirements file,
# installed with --no-deps --require-hashes and stamped, so a second run with unchanged pins does nothing.
#
#   source "$root/infra/venv-lib.sh"
#   venv_create TAG VENV PYTHON        # create VENV with PYTHON unless it exists
#   venv_up_to_date TAG VENV STAMP     # exit the installer (0) when STAMP holds $want
#   pip_pinned VENV REQ                # install REQ exactly: --no-deps --require-hashes
#   pip_editable VENV PATH...          # the project's own packages, editable (no hashes: they are this tree)
#   pip_complete VENV                  # pip check: a --no-deps list must be a complete resolution
#   venv_stamp TAG VENV STAMP          # write $want to STAMP, say done
#
# TAG is the installer's name in its messages ("install-worker"); $want is the installer's hash of what it
# installs (its requirements and any project files), set before venv_up_to_date.

venv_create() {
  local tag="$1" venv="$2" python="$3"
  if [ ! -x "$venv/bin/python" ]; then
    echo "[$tag] creating virtual environment $venv ($python)"
    "$python" -m venv "$venv"
  fi
}

venv_up_to_date() {
  local tag="$1" venv="$2" stamp="$3"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "[$tag] $venv is up to date"
    exit 0
  fi
}

# pip says "... is ignored: it is neither a file nor a directory" for pins of local wheel paths on machines without
# them; the filter keeps every other line of its stderr.
_pip_quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

pip_pinned() {
  local venv="$1" req="$2"
  # --require-hashes: every pin carries the sha256 of its files (written by infra/pin_hashes.py); a file whose bytes
  # are not one of them (tampered with, substituted) fails here with pip's "THESE PACKAGES DO NOT MATCH THE HASHES".
  _pip_quiet "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r "$req"
}

pip_editable() {  # pip_editable VENV PATH...: the project's own packages, editable, no dependencies, no hashes
  local venv="$1"
  shift
  local args=()
  for path in "$@"; do args+=(-e "$path"); done
  _pip_quiet "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation "${args[@]}"
}

pip_complete() {
  # --no-deps trusts the list to be a complete resolution: pip check proves it is.
  "$1/bin/python" -m pip check --disable-pip-version-check >/dev/null
}

venv_stamp() {
  local tag="$1" venv="$2" stamp="$3"
  echo "$want" > "$stamp"
  echo "[$tag] done: $venv"
}
