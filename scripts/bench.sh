#!/usr/bin/env bash
# Reproduces docs/benchmarks.md's table: builds the release daemon and the bench, raises
# the open-file limit (10,000 WebSocket connections on both ends), and runs every scenario.
# Extra arguments go to switchboard-bench (e.g. --messages 500 for a quicker run).
# With --clean-build first, also times a clean release build of the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--clean-build" ]]; then
  shift
  tmp=$(mktemp -d)
  start=$(date +%s.%N)
  CARGO_TARGET_DIR="$tmp" cargo build --release --locked -p switchboard >/dev/null 2>&1
  end=$(date +%s.%N)
  echo "clean release build: $(awk "BEGIN { printf \"%.1f\", $end - $start }") s"
  rm -rf "$tmp"
fi

# The daemon on its own: built beside the bench, it would get the features the testkit
# turns on in shared crates (rmcp's server side), and be bigger than what users run.
cargo build --release --locked -p switchboard
cargo build --release --locked -p switchboard-bench -p switchboard-testkit --bin switchboard-bench --bin mcp-test-server
ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 65536 || true
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r)"
# The daemon gets core 1, the load generator and the scripted LLM core 0, so neither
# measures the other's CPU use. Pass --daemon-cpus 0-1 (and drop taskset) to share.
exec taskset -c 0 target/release/switchboard-bench --daemon target/release/switchboard --daemon-cpus 1 "$@"
