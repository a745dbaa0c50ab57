#!/usr/bin/env bash
# A program using uverbs runs cleanly under valgrind's memcheck, also when
# built with one codegen unit (what a release profile with `lto` or
# `codegen-units = 1` gives a static binary): the library's unit tests run
# under memcheck, which fails on any error it reports; then again with
# memory definitely lost counted as an error; then every integration test.
#
# What it guards: rustix's own auxv reader (`prctl(PR_GET_AUXV)`, Linux 6.4
# and later) gets the host's auxv under valgrind, whose vDSO address
# valgrind's guest does not have, and reads the ELF header there (rustix
# issue #1559): memcheck reports an invalid read, and in this build the
# process dies of SIGSEGV at the first `rustix::param::page_size()`. The
# library takes its page size from libc instead (src/page.rs), so nothing of
# it starts that reader. Needs valgrind; a release build of the library's
# and integration tests in target/memcheck (a minute or two), then some two
# minutes under memcheck.
#
#   tools/memcheck.sh
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR=target/memcheck CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
# The library's unit tests and every integration test binary, one build.
executables=$(cargo test --release -p uverbs --lib --tests --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')
bin=$(grep '/uverbs-[0-9a-f]*$' <<<"$executables" | tail -n1)
[ -x "$bin" ] || { echo "no test binary" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# 1. Every unit test of the library (the unsafe code over the fake kernel,
# the rings, the mappings, the fork tracker) but one: under valgrind a forked
# child cannot map a page at a given free address (valgrind's own address
# space manager refuses MAP_FIXED_NOREPLACE there), which that test needs.
echo "memcheck: the library's unit tests"
valgrind -q --error-exitcode=99 "$bin" --test-threads=2 --exact \
    --skip transport::mapping::tests::a_forked_child_inherits_no_ring_and_its_copy_unmaps_nothing \
    >"$log" 2>&1 || { rc=$?; cat "$log"; echo "FAILED under memcheck (exit $rc)"; exit 1; }
summary=$(grep "^test result: ok" "$log") || { cat "$log"; echo "FAILED: no test summary"; exit 1; }
echo "memcheck: clean; $summary"

# 2. The same with memory definitely lost counted as an error, but for the
# tests that fork (valgrind checks a child for leaks when it exits, and a
# forked copy of the test process holds all of it) and the one that leaks
# on purpose (a destroy that unwinds leaks the requests' memory rather than
# free what the device may still use; Miri's run leaves it out too).
echo "memcheck: the same, definite leaks counted (all but the forking tests)"
valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite "$bin" --test-threads=2 \
    --skip a_forked_child --skip an_owned_siw_destroy_that_unwinds_frees_no_memory \
    >"$log" 2>&1 || { rc=$?; cat "$log"; echo "FAILED under memcheck (exit $rc)"; exit 1; }
summary=$(grep "^test result: ok" "$log") || { cat "$log"; echo "FAILED: no test summary"; exit 1; }
echo "memcheck: no leak; $summary"

# 3. Every integration test binary (over the fake kernels here; the device
# tests find no device and skip) but one: fork_map_count takes the process
# to vm.max_map_count, where valgrind itself can map nothing more.
count=0
for test in $(grep -v '/uverbs-[0-9a-f]*$' <<<"$executables"); do
    case $(basename "$test") in fork_map_count-*) continue ;; esac
    env -u UVERBS_REQUIRE_DEVICES \
        valgrind -q --child-silent-after-fork=yes --error-exitcode=99 "$test" --test-threads=2 \
        >"$log" 2>&1 || { rc=$?; cat "$log"; echo "FAILED under memcheck (exit $rc): $test"; exit 1; }
    grep -q "^test result: ok" "$log" || { cat "$log"; echo "FAILED: no test summary: $test"; exit 1; }
    count=$((count + 1))
done
[ "$count" -gt 0 ] || { echo "FAILED: no integration test binary"; exit 1; }
echo "memcheck: clean; $count integration test binaries"
