#!/usr/bin/env bash
# Install the PostgreSQL server binaries (initdb, pg_ctl, postgres) for the tests
# of shared studies. Idempotent: does nothing when they are already there.
# The tests start their own throw-away cluster; no system service is started here.
set -euo pipefail

found() {
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

if found; then
  echo "== PostgreSQL server binaries already installed"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_postgres.sh: no apt-get here; install the PostgreSQL server (initdb, pg_ctl) yourself" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install_postgres.sh: needs root or sudo" >&2; exit 1; }
  sudo=(sudo)
fi

echo "== installing PostgreSQL (apt)"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends postgresql
found || { echo "install_postgres.sh: postgresql installed but initdb not found" >&2; exit 1; }
echo "== PostgreSQL installed: $(ls -d /usr/lib/postgresql/*/bin | tail -1)"
