#!/usr/bin/env bash
# Install the Debian packages the tests drive: chromium and chromium-driver (browser tests) and
# prometheus (the GPU utilization reader's tests; without it they build one from Go).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "chromium or prometheus is missing and this user cannot install them; browser tests will be skipped" >&2
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver prometheus >/dev/null
chromium --version
