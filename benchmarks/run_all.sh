#!/usr/bin/env bash
# Run every benchmark one after another (quick variants where there are any), from anywhere.
# Usage: benchmarks/run_all.sh [--full]    (--full: the full start-up benchmark, N = 1, 10, 50)
set -uo pipefail

cd "$(dirname "$0")/.."
python=.venv/bin/python
[[ -x $python ]] || python=python3

startup_args=(--quick)
[[ ${1:-} == --full ]] && startup_args=()

failed=()
run() {
    echo
    echo "\$ $python benchmarks/$*"
    "$python" "benchmarks/$@" || failed+=("$1")
}

run reload_latency.py
run churn.py
run availability.py
run gate_cost.py
run startup.py "${startup_args[@]}"
run serve_startup.py
run endurance.py
run gateway_overhead.py
run hostile.py
run huge_messages.py
run lsp.py
run peers.py
run fleet.py

echo
if ((${#failed[@]})); then
    echo "failed: ${failed[*]}"
    exit 1
fi
echo "all benchmarks ran"
