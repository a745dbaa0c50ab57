#!/usr/bin/env bash
# Instructions per call of the hot data-path calls, against their budgets.
#
# Builds the library's tests in release, runs each instruction-count probe
# named in src/provider/call_probe.rs (BUDGETS: driver, function, budget)
# under valgrind's callgrind, collecting only inside the measured
# functions, prints each function's inclusive Ir per call (first, cold
# call included) beside its budget, and fails when one exceeds it. Needs
# valgrind (callgrind_annotate with it). .ci/run runs it where valgrind is
# installed (the release build of the tests takes minutes on a clean clone).
#
#   tools/ir-budget.sh
set -euo pipefail
cd "$(dirname "$0")/.."

src=src/provider/call_probe.rs
iters=$(sed -n 's/^pub(crate) const ITERS: u64 = \([0-9_]*\);/\1/p' "$src" | tr -d _)
[ -n "$iters" ] || { echo "no ITERS in $src"; exit 2; }
# (|| true: a failed build is shown below, not a silent exit under pipefail.)
build=$(cargo test --release -p uverbs --lib --no-run 2>&1 || true)
bin=$(echo "$build" | sed -n 's/.*Executable unittests src\/lib.rs (\(.*\))/\1/p' | tail -1)
[ -x "$bin" ] || { echo "$build"; echo "no test binary"; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# ("driver", "function", budget), one a line.
budgets=$(sed -n 's/^ *("\([a-z0-9]*\)", "\([a-z_]*\)", \([0-9]*\)),$/\1 \2 \3/p' "$src")
[ -n "$budgets" ] || { echo "no budgets in $src"; exit 2; }
fail=0
for driver in $(echo "$budgets" | cut -d' ' -f1 | sort -u); do
    case $driver in
    rxe) loop=provider::rxe::call_probe::rxe_calls_loop ;;
    siw) loop=provider::siw::wiring_tests::siw_calls_loop ;;
    *) echo "no loop for driver $driver"; exit 2 ;;
    esac
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
        --toggle-collect='*call_probe::probe_*' \
        "$bin" --ignored --exact "$loop" --test-threads=1 >"$out/log" 2>&1 ||
        { cat "$out/log"; exit 2; }
    callgrind_annotate --inclusive=yes "$out/cg" >"$out/annotated"
    echo "$loop"
    while read -r l f budget; do
        [ "$l" = "$driver" ] || continue
        # The poll runs once per post, both kinds of post: twice ITERS.
        calls=$iters
        [ "$f" = probe_poll ] && calls=$((2 * iters))
        # (|| true: a function missing from the profile is reported below,
        # not a silent exit under pipefail.)
        ir=$({ grep -E ":uverbs::provider::call_probe::$f " "$out/annotated" || true; } |
            awk '{ gsub(",", "", $1); print $1 }')
        [ -n "$ir" ] || { echo "  $f: not found in the profile"; fail=1; continue; }
        per=$(awk -v ir="$ir" -v n="$calls" 'BEGIN { printf "%.1f", ir / n }')
        verdict=ok
        awk -v p="$per" -v b="$budget" 'BEGIN { exit !(p > b) }' && { verdict="OVER BUDGET"; fail=1; }
        printf '  %-28s %8s Ir per call (budget %s) %s\n' "$f" "$per" "$budget" "$verdict"
    done <<<"$budgets"
done
exit $fail
