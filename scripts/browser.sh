#!/usr/bin/env bash
# The browser the review service's browser test drives: Debian's Chromium at /usr/bin/chromium.
# `scripts/browser.sh install` installs it with apt-get when it is missing (Playwright's own
# browser download is not used).
set -euo pipefail

CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

case "${1:-}" in
  install)
    if [ -x "$CHROMIUM" ]; then
      exit 0
    fi
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo >/dev/null || { echo "error: need root or sudo to install chromium" >&2; exit 1; }
      SUDO="sudo"
    fi
    echo "== installing chromium (apt-get)"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
    ;;
  *)
    echo "usage: $0 install" >&2
    exit 2
    ;;
esac
