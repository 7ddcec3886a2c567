#!/usr/bin/env bash
# One-time (and idempotent) set-up of a Debian 12 / Ubuntu 22.04+ machine for oppsched:
#   1. installs the Debian packages the project needs (only those missing),
#   2. creates .venv from /usr/bin/python3 with --system-site-packages (GNU Radio's Python
#      lives in the system site-packages and must stay visible),
#   3. installs the `oppsched` Python package (tools/) into it, editable.
# A second run with nothing to do takes well under a second.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git clang-format
  # SPM-AF's sender marker (host/spm_mark): a BPF program (clang -target bpf, libbpf's
  # headers) and its loader (links libbpf)
  clang libbpf-dev
  # `make fuzz` (docs/fuzzing.md): libFuzzer and the ASan/UBSan runtimes of Debian 12's clang 14
  libclang-rt-14-dev
  # radio
  gnuradio gnuradio-dev libvolk2-dev libuhd-dev uhd-host
  # C++ libraries
  libboost-dev libboost-program-options-dev libboost-system-dev libboost-thread-dev
  libzmq3-dev cppzmq-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libgmp-dev
  libsodium-dev  # SipHash for the flow tables keyed by traffic (host/include/oppsched/tcpip.h)
  libseccomp-dev  # the daemons' seccomp allow-lists (host/daemon/seccomp, docs/security.md)
  libgtest-dev libgmock-dev libbenchmark-dev pybind11-dev
  # Python
  python3 python3-dev python3-venv python3-pip python3-setuptools python3-wheel
  python3-numpy python3-scipy python3-pandas python3-matplotlib python3-yaml python3-pytest
  python3-scapy python3-zmq python3-distributed python3-pytest-xdist python3-jsonschema
  python3-cryptography  # the sweep cluster's TLS certificates (`oppsched keys cluster`)
  python3-hypothesis  # property-based tests of the readers (tools/tests/test_fuzz_readers.py)
  python3-prometheus-client  # `--metrics`: the live figures of a run (tools/oppsched/run/live.py)
  prometheus  # the Prometheus server that scrapes them in tools/tests/test_live.py
  libjs-chart.js  # the charts of the live page the `--metrics` endpoint serves
  chromium chromium-driver python3-selenium  # the live page tested in a headless browser
  # network tools for the end-to-end runs
  iperf3 tcpdump tshark iproute2 procps kmod
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: not root, using sudo to install Debian packages"
    sudo=(sudo)
  fi
  echo "bootstrap: installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  # tshark asks whether non-root users may capture; answer for it.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | "${sudo[@]}" debconf-set-selections
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/oppsched-apt.log 2>&1 || {
    echo "bootstrap: apt-get install failed; last lines of /tmp/oppsched-apt.log:" >&2
    tail -n 30 /tmp/oppsched-apt.log >&2
    exit 1
  }
  echo "bootstrap: Debian packages installed"
  # Debian's prometheus package enables a server on every interface (:9090); the tests
  # start their own on loopback, so the one just installed is stopped and disabled.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null &&
    systemctl is-enabled --quiet prometheus 2>/dev/null; then
    "${sudo[@]}" systemctl disable --now prometheus >/dev/null 2>&1 &&
      echo "bootstrap: disabled the prometheus service the package started (listening on :9090)"
  fi
fi

# The unprivileged system user the processes of a testbed run switch to after set-up
# (docs/testbed.md, "Privilege separation"): no login shell, no home. Without it runs use
# `nobody`.
if ! getent passwd oppsched >/dev/null; then
  sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin oppsched
  echo "bootstrap: created the system user oppsched"
fi

venv=$top/.venv
if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating $venv from /usr/bin/python3 (--system-site-packages)"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi

# Editable install of tools/ (no downloads: build dependencies come from Debian's setuptools).
stamp=$venv/.oppsched-installed
if [ ! -f "$stamp" ] || [ tools/pyproject.toml -nt "$stamp" ]; then
  echo "bootstrap: installing the oppsched Python package into .venv"
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps --no-index -e tools
  touch "$stamp"
fi

# The compiled extension modules are built by CMake into build/python; make the venv see them.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pth="$site/oppsched-build.pth"
want="$top/build/python"
if [ ! -f "$pth" ] || [ "$(cat "$pth")" != "$want" ]; then
  echo "$want" >"$pth"
fi
