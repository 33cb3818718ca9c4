#!/usr/bin/env bash
# Install the Debian packages the test-suite drives for real, when they are missing:
# prometheus (server + promtool), prometheus-alertmanager (alertmanager + amtool), chromium (the Perfetto UI's trace processor), openssl (test certificates).
# Needs root (CI runs as root).  Prints what it does; does nothing when all are present.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v amtool >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
[ ${#need[@]} -eq 0 ] && exit 0
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
if [ "$(id -u)" != 0 ]; then
  echo "system-deps: missing ${need[*]}; run as root or: sudo apt-get install -y ${need[*]}" >&2
  exit 0
fi
echo "system-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
