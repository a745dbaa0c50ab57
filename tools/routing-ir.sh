#!/usr/bin/env bash
# Instructions (Ir, user space, callgrind) per completion the CQ routing
# hands out with N owners on one CQ: the loop of
# `cq_routing::tests::routing_ir_probe` (src/cq_routing.rs), one callgrind
# run per N, counting only inside its measured call (`poll_as`, inclusive).
# Needs valgrind.
#
#   tools/routing-ir.sh                # N = 1 2 10 100 1000 10000
#   tools/routing-ir.sh 1 10000        # the N given
#   UVERBS_PROBE_DIRECT=1 tools/routing-ir.sh
#       # each owner polls right after its own completion: nothing held,
#       # the lookup alone
set -euo pipefail
cd "$(dirname "$0")/.."

bin=$(cargo test --release -p uverbs --lib --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\/uverbs-[0-9a-f]*\)".*/\1/p' | tail -n1)
[ -x "$bin" ] || { echo "no test binary found" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

printf '%-8s %12s %14s\n' owners completions "Ir/completion"
for n in "${@:-1 2 10 100 1000 10000}"; do
    for owners in $n; do
        UVERBS_PROBE_OWNERS=$owners valgrind --tool=callgrind \
            --callgrind-out-file="$out/$owners.out" --toggle-collect='*cq_routing*poll_as*' \
            "$bin" --ignored --exact cq_routing::tests::routing_ir_probe --nocapture \
            >"$out/$owners.log" 2>&1 || { cat "$out/$owners.log" >&2; exit 1; }
        # The probe prints the completions it routed after its warm-up round.
        routed=$(sed -n 's/^routing probe: [0-9]* owners, \([0-9]*\) completions routed.*/\1/p' "$out/$owners.log")
        # Collection is on only inside poll_as: the totals are its inclusive Ir.
        ir=$(sed -n 's/^totals: \([0-9]*\).*/\1/p' "$out/$owners.out")
        [ -n "$routed" ] && [ -n "$ir" ] || { echo "owners $owners: no count" >&2; exit 1; }
        awk -v o="$owners" -v r="$routed" -v ir="$ir" \
            'BEGIN { printf "%-8s %12d %14.1f\n", o, r, ir / r }'
    done
done
