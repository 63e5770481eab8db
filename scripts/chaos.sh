#!/usr/bin/env bash
# The cluster's chaos run, longer than the test suite's bounded one (tests/chaos.rs): for each
# seed, SECONDS of nemesis — workers and the Telegram-polling gateway killed with -9, NATS
# restarted, a worker paused past its lease — over 20 web chats and 3 Telegram people of 50
# messages each and a scheduled job, then the invariants checked (nothing lost, nothing
# answered twice, no hole or duplicate in a transcript or a history, each due time once).
#
#   scripts/chaos.sh [SECONDS] [SEED ...]      # default: 300 seconds, seeds 1 2 3
#
# Prints one report line per run (what the nemesis did, and a count for each invariant) and
# exits non-zero when any run broke one. Needs what .ci/run installs (nats-server, openssl);
# builds the tests with the cluster feature first. Everything runs on 127.0.0.1.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-300}
shift || true
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3)

features=switchboard/otlp,switchboard/mcp,switchboard/slack,switchboard/whatsapp,switchboard/signal,switchboard/email,switchboard/matrix,switchboard/cluster
report=$(mktemp)
trap 'rm -f "$report"' EXIT

cargo test --locked --features "$features" --test e2e --no-run >/dev/null 2>&1 \
    || { echo "the tests do not build: cargo test --features $features --test e2e --no-run"; exit 1; }

failed=0
for seed in "${seeds[@]}"; do
    echo "== seed $seed, $seconds s of nemesis"
    started=$(date +%s)
    SWITCHBOARD_CHAOS_SEED=$seed \
    SWITCHBOARD_CHAOS_SECONDS=$seconds \
    SWITCHBOARD_CHAOS_WEB_CHATS=20 \
    SWITCHBOARD_CHAOS_MESSAGES=50 \
    SWITCHBOARD_CHAOS_PEOPLE=3 \
    SWITCHBOARD_CHAOS_PERSON_MESSAGES=50 \
    SWITCHBOARD_CHAOS_REPORT="$report" \
        cargo test --locked --features "$features" --test e2e chaos:: -- --nocapture >"$report.log" 2>&1
    status=$?
    if [ $status -ne 0 ]; then
        failed=1
        grep -E '^chaos: ' "$report.log" | grep -v '^chaos: seed' | head -n 20
    fi
    echo "   took $(( $(date +%s) - started )) s, $([ $status -eq 0 ] && echo clean || echo FAILED)"
done
echo
echo "== report ($(uname -m), $(nproc) cores, $(date -u +%Y-%m-%d))"
cat "$report"
rm -f "$report.log"
exit $failed
