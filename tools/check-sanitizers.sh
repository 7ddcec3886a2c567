#!/usr/bin/env bash
# `make check-sanitizers` (docs/fuzzing.md, "Sanitizer builds"): two builds of the project
# with clang 14 and the sanitizers, each in its own folder, and ctest in each:
#   - build-asan/ (-DOPPSCHED_SANITIZE=address,undefined, -fno-sanitize-recover=undefined):
#     every target, then every ctest test: the C++ GoogleTest binaries (mac.,
#     phy., daemon.), the fuzz replays and the PHY's Python QA (phy.qa_*), the latter with
#     the shared ASan runtime preloaded into /usr/bin/python3;
#   - build-tsan/ (-DOPPSCHED_SANITIZE=thread): the test binaries that hold the threaded
#     tests, then those tests (TSAN_TESTS below).
# Configuring happens once per folder; a second run rebuilds only what changed. Builds run
# under `nice -n 19` with SAN_JOBS (2) jobs. Suppressions: tools/sanitizers/*.supp, each
# entry commented. Ends with a summary per build (tests run, failed, minutes) and exits
# non-zero when a build or a test failed. Not part of `make test`.
#   SAN_BUILDS="asan tsan" (default) or one of them; SAN_JOBS=2; ASAN_BUILD, TSAN_BUILD
#   (folders); SAN_CC, SAN_CXX (clang-14, clang++-14: the Python QA preloads that clang's
#   ASan runtime).
set -uo pipefail
# All of it in one function, read before it runs: editing the file meanwhile cannot change
# a run under way.
main() {
    top=$(cd "$(dirname "$0")/.." && pwd)
    cd "$top"
    builds=${SAN_BUILDS:-asan tsan}
    jobs=${SAN_JOBS:-2}
    asan_build=${ASAN_BUILD:-build-asan}
    tsan_build=${TSAN_BUILD:-build-tsan}
    supp=$top/tools/sanitizers
    cc=${SAN_CC:-clang-14}
    cxx=${SAN_CXX:-clang++-14}

    # The threaded code and the tests that run it concurrently (docs/fuzzing.md):
    #   daemon.disk_syncer.*   the daemons' disk thread (host/daemon/common/disk_syncer.cc)
    #   phy.LdpcPayload.encoder_selection_cache_*_across_threads   tb_codec's tb_selection_cache
    #                          shared by two encoding threads (gr-oppsched/lib/tb_codec.cc)
    #   phy.MacGrantSource.*   mac_grant_source's receive thread against the counters' readers
    #                          and stop() (gr-oppsched/lib/mac_grant_source_impl.cc)
    # Not here: daemon.seccomp.when_installed_while_zmq_threads_are_starting_*, whose children
    # install the daemons' seccomp filter: under TSan, ZeroMQ's I/O thread calls pipe2 (TSan's
    # runtime; the allow-lists refuse it), so the child dies of SIGSYS under TSan only.
    TSAN_TESTS='^(daemon\.disk_syncer\.|phy\.LdpcPayload\.encoder_selection_cache_.*across_threads$|phy\.MacGrantSource\.)'
    TSAN_TARGETS="phy_tests daemon_tests"
    # The PHY's Python QA: run by /usr/bin/python3 with the ASan runtime preloaded.
    PY_QA='^phy\.qa_'

    configure() {  # folder sanitizers
        if [ -f "$1/build.ninja" ]; then
            # A folder configured otherwise (e.g. by hand with gcc) is refused, not reused.
            local san cxx_had
            san=$(sed -n 's/^OPPSCHED_SANITIZE:[A-Z]*=//p' "$1/CMakeCache.txt")
            cxx_had=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$1/CMakeCache.txt")
            if [ "$san" != "$2" ] || [ "$(basename "$cxx_had")" != "$(basename "$cxx")" ]; then
                echo "$1: configured with OPPSCHED_SANITIZE=$san and $cxx_had, not $2 and" \
                    "$cxx; remove the folder or name another (ASAN_BUILD, TSAN_BUILD)" >&2
                return 1
            fi
            return 0
        fi
        nice -n 19 cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DOPPSCHED_SANITIZE="$2" \
            -DOPPSCHED_BUILD_BENCH=OFF -DPython3_EXECUTABLE=/usr/bin/python3
    }

    # ctest's "N% tests passed, F tests failed out of T" -> "T F" (or "0 0" without one)
    counts() {
        sed -nE 's/.*tests passed, ([0-9]+) tests? failed out of ([0-9]+).*/\2 \1/p' "$1" | tail -n 1 |
            grep . || echo "0 0"
    }

    declare -A run failed build_min test_min status
    minutes_since() { awk -v s=$(($(date +%s) - $1)) 'BEGIN { printf "%.1f", s / 60 }'; }
    overall=0

    for b in $builds; do
        t0=$(date +%s)
        case $b in
        asan)
            dir=$asan_build
            echo "== $dir: ASan + UBSan, every target, every ctest test =="
            # Set for the build too: it runs each test binary to list its tests.
            common="halt_on_error=1:abort_on_error=0:check_initialization_order=1:strict_init_order=1"
            export ASAN_OPTIONS="$common:detect_leaks=1"
            export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
            export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
            # Every target: the daemons and the MAC's bindings too, which no ctest test runs,
            # so that every file is compiled with clang and the sanitizers.
            configure "$dir" address,undefined && nice -n 19 cmake --build "$dir" -j "$jobs"
            ok=$?
            build_min[$b]=$(minutes_since "$t0")
            t0=$(date +%s)
            if [ "$ok" -eq 0 ]; then
                # The C++ tests (their executables carry the static runtime).
                nice -n 19 ctest --test-dir "$dir" \
                    --output-on-failure -j "$jobs" -E "$PY_QA" 2>&1 | tee "$dir/ctest-cpp.log"
                # The Python QA: the interpreter is not instrumented, so the runtime is preloaded;
                # CPython keeps its objects at exit, so no leak check there.
                rt=$("$cxx" -print-file-name=libclang_rt.asan-x86_64.so)
                LD_PRELOAD="$rt" ASAN_OPTIONS="$common:detect_leaks=0" nice -n 19 ctest \
                    --test-dir "$dir" --output-on-failure -j "$jobs" -R "$PY_QA" 2>&1 |
                    tee "$dir/ctest-py.log"
                read -r r1 f1 < <(counts "$dir/ctest-cpp.log")
                read -r r2 f2 < <(counts "$dir/ctest-py.log")
                run[$b]=$((r1 + r2))
                failed[$b]=$((f1 + f2))
                status[$b]=$([ $((f1 + f2)) -eq 0 ] && [ $((r1 + r2)) -gt 0 ] && echo ok || echo FAILED)
            else
                run[$b]=0 failed[$b]=0 status[$b]="BUILD FAILED"
            fi
            ;;
        tsan)
            dir=$tsan_build
            echo "== $dir: TSan, $TSAN_TARGETS, the threaded tests =="
            export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
            # shellcheck disable=SC2086
            configure "$dir" thread && nice -n 19 cmake --build "$dir" -j "$jobs" --target $TSAN_TARGETS
            ok=$?
            build_min[$b]=$(minutes_since "$t0")
            t0=$(date +%s)
            if [ "$ok" -eq 0 ]; then
                nice -n 19 ctest --test-dir "$dir" --output-on-failure -j "$jobs" \
                    -R "$TSAN_TESTS" 2>&1 | tee "$dir/ctest-tsan.log"
                read -r r f < <(counts "$dir/ctest-tsan.log")
                run[$b]=$r
                failed[$b]=$f
                status[$b]=$([ "$f" -eq 0 ] && [ "$r" -gt 0 ] && echo ok || echo FAILED)
            else
                run[$b]=0 failed[$b]=0 status[$b]="BUILD FAILED"
            fi
            ;;
        *)
            echo "SAN_BUILDS: unknown build '$b' (asan or tsan)" >&2
            exit 2
            ;;
        esac
        test_min[$b]=$(minutes_since "$t0")
        [ "${status[$b]}" = ok ] || overall=1
    done

    echo "== sanitizer summary =="
    printf '%-6s %-12s %7s %7s %11s %10s\n' build folder tests failed "build (min)" "tests (min)"
    for b in $builds; do
        dir=$([ "$b" = asan ] && echo "$asan_build" || echo "$tsan_build")
        printf '%-6s %-12s %7s %7s %11s %10s  %s\n' "$b" "$dir" "${run[$b]}" "${failed[$b]}" \
            "${build_min[$b]}" "${test_min[$b]}" "${status[$b]}"
    done
    if [ "$overall" -ne 0 ]; then
        echo "SANITIZER CHECKS FAILED: logs in <folder>/ctest-*.log"
        exit 1
    fi
    echo "no sanitizer findings"
}
main "$@"
