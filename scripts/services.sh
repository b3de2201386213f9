#!/usr/bin/env bash
# What the tests need from Debian: redis-server and PostgreSQL (the shared approval stores) and
# promtool, from the prometheus package (the alert rules are checked and unit-tested with it).
#   services.sh install   apt-install them when their binaries are missing (idempotent, quiet)
# The tests start and stop their own redis and PostgreSQL instances on free ports
# (tests/services.py); the prometheus package's own service is never started.
set -euo pipefail

have_redis() { command -v redis-server >/dev/null 2>&1; }
have_postgres() { compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; }
have_promtool() { command -v promtool >/dev/null 2>&1; }

install() {
  local wanted=()
  have_redis || wanted+=(redis-server)
  have_postgres || wanted+=(postgresql)
  have_promtool || wanted+=(prometheus)
  [ "${#wanted[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "warning: ${wanted[*]} missing and not root; those tests will be skipped" >&2
    return 0
  fi
  echo "== installing ${wanted[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  # policy-rc.d 101: install the packages without starting their system services.
  local policy=/usr/sbin/policy-rc.d created=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1
  fi
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${wanted[@]}" >/dev/null
  [ "$created" -eq 1 ] && rm -f "$policy"
  have_redis && have_postgres && have_promtool
}

case "${1:-}" in
  install) install ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
