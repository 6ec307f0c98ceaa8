#!/usr/bin/env bash
# Install Debian's headless-capable Chromium, used by the report tests to open report.html
# in a real browser. Safe to run again: nothing happens when chromium is already there.
#   bash scripts/install_chromium.sh
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  echo "== chromium already installed: $(chromium --version 2>/dev/null || echo chromium)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_chromium.sh: no apt-get here; install Chromium by hand (the report browser test is skipped without it)" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
    echo "install_chromium.sh: needs root (or sudo) to run apt-get" >&2; exit 1
  fi
fi
echo "== installing chromium (Debian package)"
"${sudo[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends chromium
echo "== chromium ready: $(chromium --version 2>/dev/null || echo chromium)"
