# oppsched: the two commands a user needs are `make run` and `make test`.
# Both set up a fresh Debian machine first (packages, .venv, build); every step is
# idempotent and does nothing when nothing changed.

BUILD      ?= build
BUILD_TYPE ?= RelWithDebInfo
VENV       := .venv
PY         := $(VENV)/bin/python
OUT        ?= results/default
EXPERIMENT ?= experiments/clamp/fading-5msps.yaml
JOBS       ?= $(shell nproc)

.PHONY: all setup build test test-cpp test-py run bench fuzz check-sanitizers format clean help

all: build

help:
	@echo "make run     set up, build, run the default experiment, write a report"
	@echo "make test    set up, build, run every test (ctest + pytest)"
	@echo "make bench   set up, build, run the benchmarks (never part of the tests)"
	@echo "make fuzz    build the fuzz targets (clang, ASan, UBSan) and run each FUZZ_S seconds"
	@echo "make check-sanitizers  every ctest test under ASan+UBSan, the threaded ones under TSan"
	@echo "make format  clang-format the C++ tree"

setup:
	@tools/bootstrap.sh
	@tools/uhd-sim-setup.sh $(VENV)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	      -DPython3_EXECUTABLE=/usr/bin/python3

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	@tools/run-tests.sh $(BUILD)

run: build
	$(PY) -m oppsched run $(EXPERIMENT) --out $(OUT)

bench: build
	cmake --build $(BUILD) -j $(JOBS) --target mac_bench phy_bench
	$(PY) -m oppsched bench --build $(BUILD)
	@if [ "$$(id -u)" = 0 ]; then $(PY) -m oppsched bench live; l=$$?; \
	$(PY) -m oppsched bench plugin; p=$$?; [ $$l = 0 ] && [ $$p = 0 ]; \
	else echo "make bench: bench live and bench plugin (real-time runs) need root: skipped"; fi

# Fuzzing (docs/fuzzing.md): FUZZ_S seconds per target, FUZZ_JOBS targets side by side, in
# build-fuzz/; new corpus entries and crash inputs land under tests/fuzz/.
FUZZ_S    ?= 60
FUZZ_JOBS ?= 1
fuzz: setup
	FUZZ_S=$(FUZZ_S) FUZZ_JOBS=$(FUZZ_JOBS) tools/fuzz.sh

# Sanitizer builds (docs/fuzzing.md, "Sanitizer builds"): build-asan/ (ASan + UBSan) runs
# every ctest test, build-tsan/ (TSan) the threaded ones (tools/check-sanitizers.sh names
# them). Slow (each build compiles the tree again); never part of `make test`.
check-sanitizers: setup
	tools/check-sanitizers.sh

format:
	git ls-files '*.h' '*.cc' | xargs clang-format -i --style=file

clean:
	rm -rf $(BUILD) build-fuzz build-asan build-tsan
