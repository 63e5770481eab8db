#!/usr/bin/env bash
# A switchboard cluster on one machine, one command: nats-server with JetStream, fake-llm, a
# gateway and two workers (built with --features cluster), all with examples/cluster/
# config.toml. Ctrl-C stops them all. Needs nats-server (apt-get install nats-server).
#
#   examples/cluster/run.sh
#   (then open http://127.0.0.1:8080; `kill` a worker's pid to see the other take over)
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v nats-server >/dev/null || PATH=$PATH:/usr/sbin
command -v nats-server >/dev/null || { echo "needs nats-server: sudo apt-get install nats-server" >&2; exit 1; }

cargo build --release --locked --features cluster -p switchboard
cargo build --release --locked -p switchboard-testkit --bin fake-llm
bin=${CARGO_TARGET_DIR:-target}/release
mkdir -p target/cluster/nats target/cluster/workspace

pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM
nats-server -js -a 127.0.0.1 -p 4222 -sd target/cluster/nats >target/cluster/nats.log 2>&1 &
pids+=($!)
"$bin/fake-llm" >/dev/null &
pids+=($!)
sleep 0.5
for member in gateway worker-1 worker-2; do
    role=${member%-*}
    "$bin/switchboard" run --role "$role" --config examples/cluster/config.toml \
        2>"target/cluster/$member.log" &
    pids+=($!)
    echo "$member: pid $!, log target/cluster/$member.log"
done
echo "open http://127.0.0.1:8080 — Ctrl-C stops the cluster"
wait
