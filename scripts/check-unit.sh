#!/usr/bin/env bash
# Checks the systemd unit as systemd reads it: `systemd-analyze verify` (syntax, the
# binary it starts) and the offline security score, which must stay at or below 1.5.
# Installs systemd (for systemd-analyze) when the machine lacks it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "installing systemd (for systemd-analyze)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi

binary="${CARGO_TARGET_DIR:-target}/debug/switchboard"
[ -x "$binary" ] || cargo build --locked -q --bin switchboard
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# verify checks that ExecStart's program exists: point it at the build.
sed "s#/usr/local/bin/switchboard#$(realpath "$binary")#" systemd/switchboard.service \
  > "$dir/switchboard.service"

systemd-analyze verify "$dir/switchboard.service"
report=$(systemd-analyze security --offline=yes "$dir/switchboard.service")
level=$(sed -n 's/.*Overall exposure level for switchboard.service: \([0-9.]*\).*/\1/p' <<< "$report")
echo "systemd-analyze security: exposure ${level:-unknown} (limit 1.5)"
awk -v level="$level" 'BEGIN { exit !(level != "" && level <= 1.5) }'
