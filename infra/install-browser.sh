#!/usr/bin/env bash
# Headless Chromium for the documentation site's browser test (tests/integration/test_docs_site.py).
#
#   bash infra/install-browser.sh     # idempotent: does nothing when `chromium` is on PATH
#
# As root on a machine with apt-get it installs Debian's `chromium` (retrying once after `apt-get update`); anywhere
# else it prints how to install it and exits 0: the browser test then fails and says the same.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "[install-browser] installing chromium (apt-get)"
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; }
  install || { DEBIAN_FRONTEND=noninteractive apt-get update -q && install; }
  exit 0
fi
echo "[install-browser] chromium is not installed: as root run 'apt-get install chromium' (Debian/Ubuntu), or put a chromium on PATH; the docs site's browser test needs it"
