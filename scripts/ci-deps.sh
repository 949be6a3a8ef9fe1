#!/usr/bin/env bash
# Installs the Debian packages the CI stages need beyond Go: promtool (package
# prometheus) checks monitoring/prometheus-rules.yml; chromium renders the
# status page in httpapi/ui's browser test. Skips what is present,
# so it costs nothing on a prepared machine; needs root (or sudo) otherwise.
set -euo pipefail

need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# --no-install-recommends: the binaries are all we need, not the extras.
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
command -v promtool >/dev/null
command -v chromium >/dev/null
