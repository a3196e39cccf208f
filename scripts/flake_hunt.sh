#!/usr/bin/env bash
# Flake hunt: run a test tier several times while two busy processes load both cores, then say how many runs
# failed and which tests failed in how many runs.
#   scripts/flake_hunt.sh [RUNS] [MAKE_TARGET]      defaults: 5 runs of test-offline (every test needing no engine)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
target=${2:-test-offline}
log_dir=$(mktemp -d /tmp/flake-hunt.XXXXXX)

burners=()
stop_burners() { kill "${burners[@]}" 2>/dev/null; wait "${burners[@]}" 2>/dev/null; }
trap stop_burners EXIT
for _ in 1 2; do
  python3 -c 'while True: pass' &
  burners+=($!)
done
echo "flake hunt: $runs runs of 'make $target' beside ${#burners[@]} busy processes; logs in $log_dir"

failed_runs=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if make --no-print-directory "$target" PYTEST_EXTRA="-p no:cacheprovider" >"$log_dir/run-$i.log" 2>&1; then
    verdict=passed
  else
    verdict=FAILED
    failed_runs=$((failed_runs + 1))
  fi
  summary=$(grep -E '^=+ .*(passed|failed|error).* in ' "$log_dir/run-$i.log" | tail -1 | tr -d '=')
  echo "run $i: $verdict in $(( $(date +%s) - start )) s:${summary}"
done

echo "flake hunt: $failed_runs of $runs runs failed"
grep -hE '^(FAILED|ERROR) ' "$log_dir"/run-*.log | sed -E 's/ - .*//' | sort | uniq -c | sort -rn \
  | awk '{ printf "  %s: failed in %d run(s)\n", $3, $1 }'
[ "$failed_runs" -eq 0 ]
