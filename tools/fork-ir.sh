#!/usr/bin/env bash
# Instructions (Ir, user space, callgrind) per fork-tracker mark and unmark
# with 1,000, 10,000 and 100,000 live ranges and a no-op advisor: the loop of
# src/fork/ir_probe.rs, one callgrind run per N. Needs valgrind.
#
#   tools/fork-ir.sh            # all three N
#   tools/fork-ir.sh 100k       # one of 1k, 10k, 100k
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=$(sed -n 's/^pub(super) const PAIRS: usize = \([0-9_]*\);/\1/p' src/fork/ir_probe.rs | tr -d _)
bin=$(cargo test --release -p uverbs --lib --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\/uverbs-[0-9a-f]*\)".*/\1/p' | tail -n1)
[ -x "$bin" ] || { echo "no test binary found" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

printf '%-6s %-8s %12s %12s\n' N scenario "Ir/mark" "Ir/unmark"
for n in "${@:-1k 10k 100k}"; do
    for case in $n; do
        valgrind --tool=callgrind --callgrind-out-file="$out/$case.out" \
            --toggle-collect='*fork*ir_probe*probe_*' \
            "$bin" --ignored --exact "fork::ir_probe::live_$case" --test-threads=1 \
            >"$out/$case.log" 2>&1 || { cat "$out/$case.log" >&2; exit 1; }
        callgrind_annotate --inclusive=yes "$out/$case.out" >"$out/$case.txt"
        for scenario in gap live overlap; do
            ir() {
                grep -E "ir_probe::probe_$1_$scenario( |\$)" "$out/$case.txt" |
                    head -n1 | awk '{gsub(",", "", $1); print $1}'
            }
            m=$(ir mark)
            u=$(ir unmark)
            awk -v n="$case" -v s="$scenario" -v m="$m" -v u="$u" -v p="$pairs" \
                'BEGIN { printf "%-6s %-8s %12.1f %12.1f\n", n, s, m / p, u / p }'
        done
    done
done
