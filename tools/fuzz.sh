#!/usr/bin/env bash
# `make fuzz FUZZ_S=600 FUZZ_JOBS=2`: builds the libFuzzer targets of tests/fuzz/ with clang,
# ASan and UBSan in build-fuzz/ and runs each for FUZZ_S seconds (docs/fuzzing.md). New
# corpus entries are merged into tests/fuzz/<target>/ (libFuzzer's -merge=1 keeps only inputs
# that add coverage, so the committed corpus stays small); a crash, a sanitizer report, a
# timeout or an out-of-memory input is saved under tests/fuzz/<target>/crashes/, which ctest
# replays in the normal build (fuzz.replay.<target>). Ends with a table: target, executions,
# coverage (libFuzzer's cov: edges, ft: features, at the end of the run), crashes.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=${FUZZ_BUILD:-build-fuzz}
seconds=${FUZZ_S:-60}
jobs=${FUZZ_JOBS:-1}
# libFuzzer's -timeout (seconds of wall time for one input, a hang above it is a crash): 10
# by default; on a machine shared with real-time runs, under nice, give more
# (FUZZ_TIMEOUT=60) so that a pause of the fuzzer is not taken for a hang.
timeout=${FUZZ_TIMEOUT:-10}
corpus=tests/fuzz

run_one() {  # target -> one row of the table on stdout; the run's log in $build/fuzz-logs
    local t=$1 exe="$build/tests/fuzz/fuzz_$1" logs="$build/fuzz-logs"
    local work; work=$(mktemp -d)
    mkdir -p "$logs" "$corpus/$t/crashes"
    local before; before=$(ls "$corpus/$t/crashes" | wc -l)
    # Fuzz into a scratch folder, reading the committed corpus (and past crashes) as seeds.
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$exe" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$corpus/$t/crashes/" "$work" "$corpus/$t" >"$logs/$t.log" 2>&1
    local rc=$?
    # Keep only what adds coverage to the committed corpus.
    "$exe" -merge=1 "$corpus/$t" "$work" >"$logs/$t.merge.log" 2>&1
    rm -rf "$work"
    # A slow unit (libFuzzer's -report_slow_units, 10 s) is no failure: on a loaded machine
    # it is the machine's pause, and a real hang is caught by -timeout as a crash. Kept in
    # the logs, out of the corpus.
    local slow; for slow in "$corpus/$t/crashes"/slow-unit-*; do
      [ -e "$slow" ] && mv "$slow" "$logs/$t.$(basename "$slow")"
    done
    local after; after=$(ls "$corpus/$t/crashes" | wc -l)
    rmdir "$corpus/$t/crashes" 2>/dev/null
    local execs cov ft
    execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$logs/$t.log" | grep -oE '[0-9]+$')
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$logs/$t.log" | tail -n 1)
    ft=${cov##* }
    cov=${cov#cov: }
    cov=${cov%% *}
    printf '%-14s %12s %8s %8s %8s %6s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" \
      "$((after - before))" "$rc"
}

if [ "${1:-}" = "--one" ]; then
  run_one "$2"
  exit 0
fi

if [ ! -f "$build/build.ninja" ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                                            -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="${FUZZ_CC:-clang-14}" -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++-14}" \
    -DOPPSCHED_FUZZ=ON -DOPPSCHED_BUILD_BENCH=OFF -DPython3_EXECUTABLE=/usr/bin/python3 \
    "${launcher[@]}" || exit 1
fi
targets=${FUZZ_TARGETS:-$(sed -n 's/^oppsched_fuzz_target(\([a-z_]*\).*/\1/p' "$corpus/CMakeLists.txt")}
cmake --build "$build" -j "$(nproc)" --target $(printf 'fuzz_%s ' $targets) || exit 1
echo "== fuzzing $(echo $targets | wc -w) targets for ${seconds} s each, ${jobs} at a time =="
rows=$(printf '%s\n' $targets | xargs -P "$jobs" -I{} "$0" --one {})
{
  printf '%-14s %12s %8s %8s %8s %6s\n' target executions cov ft crashes exit
  printf '%s\n' "$rows" | sort
} | tee "$build/fuzz-summary.txt"
# A crash (or a libFuzzer exit other than 0) fails the run.
if printf '%s\n' "$rows" | awk '$5 != 0 || $6 != 0 { bad = 1 } END { exit !bad }'; then
  echo "FUZZING FOUND PROBLEMS: inputs under $corpus/<target>/crashes/, logs in $build/fuzz-logs/"
  exit 1
fi
echo "no crashes"
