#!/usr/bin/env bash
# Installs what UHD 4.3's device simulator needs (docs/howto/uhd-simulator.md); `make`'s
# set-up runs it after tools/bootstrap.sh (which made VENV). Idempotent: with everything
# installed it only checks the Debian packages.
#   Debian packages: python3-uhd (usrp_mpm built for the simulator, uhd.chdr) and what
#   usrp_mpm imports (gevent, pyroute2, netaddr, pyudev, systemd, six, msgpack).
# Nothing comes from PyPI: the MessagePack-RPC server usrp_mpm's RPC server is built on
# (PyPI's mprpc, which does not build on Python 3.11) is the project's own
# (tools/oppsched/uhd_sim/mpm_path/oppsched_msgpack_rpc.py, fault 2 of the shims).
set -euo pipefail
venv=${1:?usage: uhd-sim-setup.sh VENV}
packages=(python3-uhd python3-gevent python3-pyroute2 python3-netaddr python3-pyudev
  python3-systemd python3-six python3-msgpack)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  echo "uhd-sim-setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/tmp/oppsched-uhd-sim-apt.log 2>&1 || {
    echo "uhd-sim-setup: apt-get install failed; last lines of /tmp/oppsched-uhd-sim-apt.log:" >&2
    tail -n 30 /tmp/oppsched-uhd-sim-apt.log >&2
    exit 1
  }
fi

# An earlier set-up installed mprpc and gsocketpool from PyPI into VENV: nothing uses them
# now (the shims stand in for mprpc even where it is installed); remove them and its records.
if [ -f "$venv/.uhd-sim-installed" ] || [ -f "$venv/.uhd-sim-unavailable" ]; then
  "$venv/bin/python" -m pip uninstall -q -y mprpc gsocketpool >/dev/null 2>&1 || true
  rm -f "$venv/.uhd-sim-installed" "$venv/.uhd-sim-unavailable"
fi
