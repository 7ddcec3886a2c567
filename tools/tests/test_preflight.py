"""USRP device profiles and image manifest (firmware/), the radios' settings against their
profiles (oppsched check), and `oppsched preflight`: every check fed recorded output of
uhd_find_devices, uhd_usrp_probe and benchmark_rate (tools/tests/data/uhd/), plus the real
uhd_find_devices of this host, which finds no radio."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from oppsched.commands import preflight
from oppsched.phy import devices
from oppsched.config import ConfigError
from oppsched.commands.preflight import Check, Radio

from helpers import REPO, cfg_of, error_of, require, run_cli

DATA = Path(__file__).parent / "data" / "uhd"
UHD_EXP = REPO / "experiments" / "clamp" / "fading-uhd.yaml"
SERIALS = ["3150AAA", "3150BBB", "3150CCC", "3150DDD"]


def data(name: str) -> str:
    return (DATA / name).read_text()


def uhd_cfg(overrides=()) -> dict:
    return cfg_of(UHD_EXP.read_text(), overrides)


def radio(field="phy.uhd.ap", role="tx", device="b210", **settings) -> Radio:
    r = {"args": "type=b200,serial=3150AAA", "device": "", "freq_hz": 2.45e9, "gain_db": 50.0,
         "antenna": "TX/RX" if role == "tx" else "RX2", "bandwidth_hz": 0.0,
         "clock_source": "internal", "time_source": "internal", **settings}
    return Radio(field, r, role, devices.profile(device), "phy.uhd.device")


# ----------------------------------------------------------------------------------------
# firmware/: profiles and images


def test_every_lab_usrp_has_a_valid_profile_and_its_images():
    ps = devices.profiles()
    assert set(ps) == {"b200", "b210", "b205mini", "n210", "x310", "n310", "e320_sim"}
    imgs = devices.load_images()
    for name, p in ps.items():
        assert p["device"] == name
        assert p["tx_lead_s"] > 0 and p["frequency"]["min_hz"] < p["frequency"]["max_hz"]
        if p["transport"] == "usb3":
            assert p["host"]["usb"] == "3.0"
        else:
            assert p["host"]["rmem_max"] > 0 and p["host"]["mtu"] >= 1500
        # a simulated device (UHD's device simulator, docs/howto/uhd-simulator.md) has none
        assert bool(imgs["profiles"][name]["targets"]) == (name != "e320_sim"), name
    assert imgs["uhd_version"] == "4.3.0"
    assert ps["b210"]["gain"]["tx"]["max_db"] == 89.75 and ps["b210"]["gain"]["rx"]["max_db"] == 76
    assert ps["n210"]["master_clock"]["fixed_hz"] == [100e6]
    assert ps["b205mini"]["clock_sources"] == ["internal", "external"]  # no GPSDO


def test_the_image_manifest_matches_the_installed_uhd_images_downloader():
    require(shutil.which("uhd_images_downloader") is not None,
            "uhd_images_downloader is not installed (apt-get install uhd-host)")
    listed = subprocess.run(["uhd_images_downloader", "-l", "-b", ""], capture_output=True,
                            text=True, timeout=60).stdout
    urls = dict(re.findall(r"^(\S+)\s+:\s+(\S+)$", listed, re.M))
    manifest = Path(shutil.which("uhd_images_downloader")).read_text()
    for name, entry in devices.load_images()["profiles"].items():
        for t in entry["targets"]:
            assert t["target"] in urls, (name, t["target"])
            assert t["version"] in urls[t["target"]], (name, t, urls[t["target"]])
            if t["sha256"]:
                assert re.search(rf"^{t['target']}\s+{t['version']}\s+\S+\s+{t['sha256']}$",
                                 manifest, re.M), (name, t["target"])


def test_a_bad_profile_file_names_the_file_key_and_value(tmp_path):
    text = (REPO / "firmware" / "profiles" / "b210.yaml").read_text()
    bad = tmp_path / "b210.yaml"
    bad.write_text(text.replace("transport: usb3", "transport: pcie"))
    with pytest.raises(ConfigError, match=r"b210.yaml: transport: 'pcie' is not one of"):
        devices.load_profile_file(bad)
    bad.write_text(text.replace("tx: {min_db: 0.0, max_db: 89.75}",
                                "tx: {min_db: 90.0, max_db: 89.75}"))
    with pytest.raises(ConfigError, match=r"b210.yaml: gain.tx.min_db: 90.0 is above max_db"):
        devices.load_profile_file(bad)
    other = tmp_path / "b999.yaml"
    other.write_text(text)
    with pytest.raises(ConfigError, match=r"device: 'b210' differs from the file name"):
        devices.load_profile_file(other)


@pytest.mark.parametrize("device, fs, args, why", [
    ("b210", 1e6, "", None),
    ("b210", 61.44e6, "", None),
    ("b210", 70e6, "", "is above the b210's 6.144e+07 S/s"),
    ("b210", 5e3, "", "is below the b210's lowest rate 9765.62 S/s"),
    ("b210", 1e6, "type=b200,master_clock_rate=30.72e6", "is not a master clock (3.072e+07 Hz)"),
    ("b210", 1e6, "type=b200,master_clock_rate=80e6", "needs master_clock_rate 8e+07, outside"),
    ("n210", 1e6, "", None),                    # 100 MHz / 100
    ("n210", 3e6, "", "is not a master clock (1e+08 Hz) divided by an integer 1..512"),
    ("n210", 50e6, "", "is above the n210's 2.5e+07 S/s"),
    ("x310", 5e6, "", None),                    # 200 MHz / 40
    ("x310", 1.92e6, "", "needs master_clock_rate=1.8432e+08 in the args (the x310 defaults "
                         "to 2e+08 Hz)"),
    ("x310", 1.92e6, "type=x300,master_clock_rate=184.32e6", None),   # / 96
    ("x310", 1e6, "type=x300,master_clock_rate=100e6", "needs master_clock_rate 1e+08, not one"),
    ("x310", 7e6, "", "is not a master clock (2e+08, 1.8432e+08 Hz)"),
    ("n310", 1e6, "", None),                    # 125 MHz / 125
    ("n310", 1.92e6, "type=n3xx,master_clock_rate=122.88e6", None),   # / 64
])
def test_a_sample_rate_is_one_the_device_runs_at_exactly(device, fs, args, why):
    got = devices.sample_rate_error(devices.profile(device), fs, args)
    if why is None:
        assert got is None
    else:
        assert got is not None and got.startswith(why), got


# ----------------------------------------------------------------------------------------
# The experiment: phy.uhd.device and out-of-profile settings (oppsched check)


def test_the_uhd_experiment_names_the_b210_profile_and_passes_the_check():
    c = uhd_cfg()
    assert c["phy"]["uhd"]["device"] == "b210"
    r = run_cli("check", UHD_EXP)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


@pytest.mark.parametrize("overrides, expect", [
    (["phy.uhd.ap.gain_db=95"],
     "phy.uhd.ap.gain_db: 95.0 is outside the b210's TX gain range 0..89.75 dB"),
    (["devices[1].uhd.gain_db=80"],
     "devices[1].uhd.gain_db: 80.0 is outside the b210's RX gain range 0..76 dB"),
    (["phy.uhd.device=x310", "phy.uhd.sample_rate=1.92e+6"],
     "phy.uhd.ap: sample rate 1920000.0 needs master_clock_rate=1.8432e+08 in the args"),
    (["phy.uhd.ap.freq_hz=4.0e+7"], "phy.uhd.ap.freq_hz: 40000000.0 is outside the b210's "
                                  "7e+07..6e+09 Hz"),
    (["devices[0].uhd.antenna=TX2"], "devices[0].uhd.antenna: 'TX2' is not a b210 RX port "
                                     "(TX/RX, RX2)"),
    (["phy.uhd.ap.antenna=RX2"], "phy.uhd.ap.antenna: 'RX2' is not a b210 TX port (TX/RX)"),
    (["phy.uhd.device=n210", "phy.uhd.sample_rate=3.0e+6"],
     "phy.uhd.ap: sample rate 3000000.0 is not a master clock (1e+08 Hz)"),
    (["devices[2].uhd.device=b205mini", "devices[2].uhd.clock_source=gpsdo"],
     "devices[2].uhd.clock_source: 'gpsdo' is not a b205mini source (internal, external)"),
    (["phy.uhd.device=b2100"], "phy.uhd.device: 'b2100' is not a device profile"),
    (["devices[0].uhd.device=x999"], "devices[0].uhd.device: 'x999' is not a device profile"),
    (["phy.uhd.device=B210"], "phy.uhd.device: 'B210' is not a device profile name"),
    (["phy.uhd.device=''"], "phy.uhd.device: required with phy.mode uhd"),
])
def test_settings_outside_the_profile_are_rejected_naming_key_and_value(overrides, expect):
    assert error_of(UHD_EXP.read_text(), overrides).startswith(expect)


def test_oppsched_check_rejects_an_out_of_profile_gain_with_key_and_value():
    r = run_cli("check", UHD_EXP, "--set", "devices[0].uhd.gain_db=77")
    assert r.returncode == 2
    assert "devices[0].uhd.gain_db: 77.0 is outside the b210's RX gain range 0..76 dB" in r.stderr


def test_a_radio_may_name_its_own_profile():
    c = uhd_cfg(["devices[0].uhd.device=b205mini", "devices[0].uhd.args='type=b200,serial=X'"])
    (ap, *devs) = preflight.experiment_radios(c)
    assert ap.profile["device"] == "b210" and ap.profile_key == "phy.uhd.device"
    assert devs[0].profile["device"] == "b205mini"
    assert devs[0].profile_key == "devices[0].uhd.device"
    assert devs[0].settings["freq_hz"] == 2.45e9  # null: the AP's


# ----------------------------------------------------------------------------------------
# Parsers


def test_find_devices_output_is_parsed_into_device_addresses():
    assert preflight.parse_find_devices(data("find_devices_none.txt")) == []
    found = preflight.parse_find_devices(data("find_devices_4xb210.txt"))
    assert [d["serial"] for d in found] == SERIALS
    assert all(d["type"] == "b200" and d["product"] == "B210" and d["name"] == "" for d in found)
    n210, x310 = preflight.parse_find_devices(data("find_devices_network.txt"))
    assert n210 == {"serial": "F4A5C1", "addr": "192.168.10.2", "name": "", "type": "usrp2"}
    assert x310["product"] == "X310" and x310["fpga"] == "XG"


def test_probe_output_is_parsed_into_versions_sources_and_frontends():
    p = preflight.parse_probe(data("probe_b210_usb3.txt"))
    assert (p["mboard"], p["fw_version"], p["fpga_version"], p["usb"]) == ("B210", "8.0", "16.0", 3)
    assert p["time_sources"] == ["none", "internal", "external", "gpsdo"]
    assert p["clock_sources"] == ["internal", "external", "gpsdo"]
    assert [fe["name"] for fe in p["rx"]] == ["FE-RX2", "FE-RX1"]
    assert p["rx"][0]["antennas"] == ["TX/RX", "RX2"] and p["rx"][0]["gain_db"] == (0.0, 76.0)
    assert p["tx"][0]["freq_hz"] == (50e6, 6000e6) and p["tx"][0]["gain_db"] == (0.0, 89.8)
    assert p["compat_error"] is None and p["error"] is None
    bad = preflight.parse_probe(data("probe_b210_old_fpga.txt"))
    assert bad["compat_error"] == ("FPGA", "16", "14") and bad["mboard"] is None
    n = preflight.parse_probe(data("probe_n210_sbx.txt"))
    assert n["mboard"] == "N210r4" and n["rx"][0]["freq_hz"] == (400e6, 4400e6)
    assert n["rx"][0]["gain_db"] == (0.0, 31.5)  # the codec's gains are not the frontend's


def test_benchmark_output_is_parsed_into_its_counters():
    b = preflight.parse_benchmark(data("benchmark_tx_underflow.txt"))
    assert b["underruns"] == 3 and b["tx_samples"] == 4977600 and b["late"] == 0
    b = preflight.parse_benchmark(data("benchmark_rx_overflow.txt"))
    assert (b["overruns"], b["dropped"], b["rx_samples"]) == (2, 4080, 4981760)
    assert preflight.parse_benchmark(data("probe_b210_busy.txt")) is None


# ----------------------------------------------------------------------------------------
# Checks, each passing and failing


def test_found_needs_exactly_one_device_of_the_profiles_kind():
    found = preflight.parse_find_devices(data("find_devices_4xb210.txt"))
    c = preflight.check_found(radio(), found)
    assert c.ok and c.detail == "B210 serial 3150AAA"
    c = preflight.check_found(radio(args="type=b200,serial=3150EEE"), found)
    assert not c.ok and c.detail == "no device matches args 'type=b200,serial=3150EEE' (4 found)"
    assert "phy.uhd.ap.args" in c.fix and "uhd_find_devices" in c.fix
    c = preflight.check_found(radio(args="type=b200"), found)
    assert not c.ok and c.detail.startswith("4 devices match") and "serial=" in c.fix
    c = preflight.check_found(radio(device="b205mini"), found)
    assert not c.ok and "is not a USRP B205mini-i" in c.detail and "phy.uhd.device" in c.fix
    net = preflight.parse_find_devices(data("find_devices_network.txt"))
    assert preflight.check_found(radio(device="n210", args="addr=192.168.10.2"), net).ok
    assert preflight.check_found(radio(device="x310", args="type=x300,serial=31AB4F2"), net).ok


def test_an_mpm_device_is_found_by_its_addr_though_it_lists_it_as_mgmt_addr():
    """uhd_find_devices lists an MPM device's (N3xx, E3xx) address as mgmt_addr, not addr
    (recorded from UHD's device simulator, the same MPM discovery)."""
    (dev,) = preflight.parse_find_devices(data("find_devices_mpm_sim.txt"))
    assert "addr" not in dev and dev["mgmt_addr"] == "127.0.0.1"
    c = preflight.check_found(radio(device="e320_sim", args="addr=127.0.0.1,type=e3xx"), [dev])
    assert c.ok and c.detail == "e320 serial 3196D2A at 127.0.0.1"
    assert not preflight.check_found(radio(device="e320_sim", args="addr=127.0.0.2"), [dev]).ok
    r = radio(device="e320_sim", args="addr=127.0.0.1")
    r.found = dev
    c = preflight.check_link(r, None)
    assert not c.ok and "127.0.0.1/8" in c.fix
    assert preflight.check_link(r, 65536).detail == "1gbe, MTU 65536"


def test_a_simulated_device_needs_no_image_and_a_manifest_entry_says_so(tmp_path):
    assert preflight.check_images_present(radio(device="e320_sim"), None).detail == \
        "a simulated device: no image"
    bad = tmp_path / "images.yaml"
    bad.write_text("uhd_version: 4.3.0\nimages_dir: /x\nprofiles:\n"
                   "  b210: {load: none, targets: [{target: b2xx_b210_fpga_default, "
                   "version: v, sha256: '', files: []}]}\n")
    with pytest.raises(ConfigError, match="profiles.b210.targets: 1 with load none"):
        devices.load_images(bad, names=[])
    bad.write_text("uhd_version: 4.3.0\nimages_dir: /x\nprofiles:\n"
                   "  b210: {load: host, targets: []}\n")
    with pytest.raises(ConfigError, match="profiles.b210.targets: 0 with load host"):
        devices.load_images(bad, names=[])


def test_probe_finds_an_old_image_and_says_how_to_fetch_the_right_one():
    (c,) = preflight.check_probe(radio(), data("probe_b210_old_fpga.txt"), 1)
    assert not c.ok and c.name == "image" and c.detail == "FPGA image 14, UHD expects 16"
    assert c.fix == "uhd_images_downloader -t b2xx_b210_fpga_default -t b2xx_common_fw_default"
    (c,) = preflight.check_probe(radio(device="n210", antenna="TX/RX"),
                                 data("probe_b210_old_fpga.txt"), 1)
    assert "uhd_image_loader --args \"type=usrp2,addr=192.168.10.2\"" in c.fix
    (c,) = preflight.check_probe(radio(), data("probe_b210_busy.txt"), 255)
    assert not c.ok and c.name == "probe" and "LookupError" in c.detail


def test_probe_checks_the_frontend_of_the_radios_role():
    img, fe = preflight.check_probe(radio(), data("probe_b210_usb3.txt"), 0)
    assert img.ok and img.detail == "B210: FW 8.0, FPGA 16.0"
    assert fe.ok and fe.detail == "FE-TX2: 2.45e+09 Hz, 50 dB, TX/RX"
    _, fe = preflight.check_probe(radio(field="devices[0].uhd", role="rx", gain_db=40.0),
                                  data("probe_b210_usb3.txt"), 0)
    assert fe.ok and fe.detail.startswith("FE-RX2")
    # An N210 whose daughterboard is an SBX, not the profile's UBX-40: 5 GHz is out of reach
    r = radio(device="n210", args="addr=192.168.10.2", freq_hz=5.0e9, gain_db=20.0)
    img, fe = preflight.check_probe(r, data("probe_n210_sbx.txt"), 0)
    assert img.ok and not fe.ok
    assert fe.detail == "SBXv3 TX: freq_hz 5e+09 outside (400000000.0, 4400000000.0)"
    r = radio(device="n210", role="rx", antenna="LOCAL", args="addr=192.168.10.2")
    _, fe = preflight.check_probe(r, data("probe_n210_sbx.txt"), 0)
    assert not fe.ok and fe.fix == "set phy.uhd.ap.antenna to one of CAL, RX2, TX/RX"
    (c,) = preflight.check_probe(radio(device="x310", args="type=x300"),
                                 data("probe_b210_usb3.txt"), 0)
    assert not c.ok and c.detail == "the device is a B210, not a USRP X310 + UBX-160 (X310)"


def test_host_loaded_images_must_be_in_the_images_folder(tmp_path):
    c = preflight.check_images_present(radio(), tmp_path)
    assert not c.ok and c.detail == f"usrp_b210_fpga.bin, usrp_b200_fw.hex not in {tmp_path}"
    assert c.fix.startswith("uhd_images_downloader -t b2xx_b210_fpga_default")
    for f in ("usrp_b210_fpga.bin", "usrp_b200_fw.hex"):
        (tmp_path / f).write_bytes(b"\0")
    assert preflight.check_images_present(radio(), tmp_path).ok
    assert not preflight.check_images_present(radio(), None).ok
    assert preflight.check_images_present(radio(device="x310"), None).ok  # in its flash


def test_usb_radios_need_usb3_and_network_radios_the_profiles_mtu():
    r = radio()
    r.probe = preflight.parse_probe(data("probe_b210_usb2.txt"))
    c = preflight.check_link(r, None)
    assert not c.ok and c.detail == "USB 2" and "USB 3 port" in c.fix
    r.probe = preflight.parse_probe(data("probe_b210_usb3.txt"))
    assert preflight.check_link(r, None).ok
    x = radio(device="x310", args="type=x300")
    x.found = {"addr": "192.168.40.2"}
    c = preflight.check_link(x, 1500)
    assert not c.ok and c.detail == "MTU 1500 < 9000" and c.fix == "ip link set dev IFACE mtu 9000"
    assert preflight.check_link(x, 9000).ok
    c = preflight.check_link(x, None)
    assert not c.ok and "192.168.40.1/24" in c.fix


@pytest.mark.parametrize("fixture, role, ok, detail", [
    ("benchmark_tx_clean.txt", "tx", True, "TX at 1e+06 S/s: 5002240 samples, none lost"),
    ("benchmark_tx_underflow.txt", "tx", False, "TX at 1e+06 S/s: 3 underflows"),
    ("benchmark_rx_clean.txt", "rx", True, "RX at 1e+06 S/s: 5001728 samples, none lost"),
    ("benchmark_rx_overflow.txt", "rx", False,
     "RX at 1e+06 S/s: 2 overflows, 4080 dropped samples"),
    ("benchmark_rx_clean.txt", "tx", False, "TX at 1e+06 S/s: no samples moved"),
    ("probe_b210_busy.txt", "rx", False, "benchmark_rate RX at 1e+06 S/s did not finish (exit 1)"),
])
def test_benchmark_at_the_run_rate_must_lose_nothing(fixture, role, ok, detail):
    c = preflight.check_benchmark(radio(role=role, antenna="TX/RX"), 1e6, data(fixture), 1)
    assert (c.ok, c.detail) == (ok, detail)
    assert ok or c.fix


def test_clock_and_time_sources_must_match_and_exist_on_every_radio():
    a, b = radio(), radio(field="devices[0].uhd", role="rx")
    assert preflight.check_sync([a, b]).ok
    b.settings["time_source"] = "external"
    c = preflight.check_sync([a, b])
    assert not c.ok
    assert "phy.uhd.ap: internal/internal; devices[0].uhd: internal/external" in c.detail
    a.settings.update(clock_source="gpsdo", time_source="gpsdo")
    b.settings.update(clock_source="gpsdo", time_source="gpsdo")
    assert preflight.check_sync([a, b]).ok
    b.probe = {"clock_sources": ["internal", "external"], "time_sources": ["internal", "external"]}
    c = preflight.check_sync([a, b])  # the probe shows no GPSDO fitted
    assert not c.ok and c.radio == "devices[0].uhd" and "GPSDO must be fitted" in c.fix
    m = [radio(device="n210", clock_source="mimo", time_source="mimo") for _ in range(3)]
    assert preflight.check_sync(m).detail == "clock mimo with 3 radios"


def test_host_checks_pass_and_fail_with_their_fixes():
    assert preflight.check_governor(["performance"] * 2).ok
    c = preflight.check_governor(["performance", "powersave"])
    assert not c.ok and c.detail == "CPU governor powersave on 1 of 2 CPUs"
    assert c.fix.startswith("cpupower frequency-set -g performance")
    assert preflight.check_rt_priority(0, 0, 10).ok
    assert preflight.check_rt_priority(1000, 99, 10).ok
    c = preflight.check_rt_priority(1000, 0, 10)
    assert not c.ok and c.detail == "RLIMIT_RTPRIO 0 < 10" and "group usrp" in c.fix
    assert preflight.check_net_buffers([radio()], 0, 0) is None  # USB only: not needed
    n = radio(device="n210")
    c = preflight.check_net_buffers([n], 212992, 212992)
    assert not c.ok and c.detail == ("net.core.rmem_max 212992 < 50000000; "
                                     "net.core.wmem_max 212992 < 1048576")
    assert c.fix.startswith("sysctl -w net.core.rmem_max=50000000 net.core.wmem_max=1048576")
    assert preflight.check_net_buffers([n], 50000000, 1048576).ok


# ----------------------------------------------------------------------------------------
# The whole preflight, on recorded output


class RecordedProbe(preflight.Probe):
    """The tools' recorded output: four B210s (fading-uhd.yaml's serials)."""

    def __init__(self, probe_files=None, bench=None, governors=("performance",) * 2,
                 rt=(0, 0), images: Path | None = None):
        self.probe_files = probe_files or {}
        self.bench = bench or {}
        self._gov = list(governors)
        self._rt = rt
        self._images = images
        self.calls = []

    def find_devices(self):
        return data("find_devices_4xb210.txt"), 0

    def probe(self, args):
        self.calls.append(("probe", args))
        serial = devices.args_dict(args)["serial"]
        f = self.probe_files.get(serial, "probe_b210_usb3.txt")
        return data(f).replace("serial: 3150AAA", f"serial: {serial}"), 0

    def benchmark(self, args, fs, role, seconds):
        self.calls.append(("benchmark", args, fs, role, seconds))
        serial = devices.args_dict(args)["serial"]
        default = "benchmark_tx_clean.txt" if role == "tx" else "benchmark_rx_clean.txt"
        return data(self.bench.get(serial, default)), 0

    def images_dir(self):
        return self._images

    def governors(self):
        return self._gov

    def rt(self):
        return self._rt

    def sysctl(self, key):
        return 212992


@pytest.fixture
def images(tmp_path):
    for f in ("usrp_b210_fpga.bin", "usrp_b200_fw.hex"):
        (tmp_path / f).write_bytes(b"\0")
    return tmp_path


def test_a_ready_testbed_passes_every_check(images):
    lines: list[str] = []
    probe = RecordedProbe(images=images)
    rc = preflight.run(uhd_cfg(), probe, benchmark_s=5.0, out=lines.append)
    assert rc == 0, "\n".join(lines)
    text = "\n".join(lines)
    assert "FAIL" not in text and text.endswith("ready for `oppsched run`")
    # one row per check and radio: found, profile, images, image, frontend, link, benchmark
    assert len(re.findall(r"^found\s+(phy.uhd.ap|devices\[\d\].uhd)\s+pass", text, re.M)) == 4
    assert len(re.findall(r"^benchmark\s+\S+\s+pass", text, re.M)) == 4
    # the AP benchmarked for TX, the devices for RX, at the run's rate
    bench = [c for c in probe.calls if c[0] == "benchmark"]
    assert [(c[3], c[2]) for c in bench] == [("tx", 1e6)] + [("rx", 1e6)] * 3
    assert "socket buffers" not in text  # USB radios only


def test_a_testbed_with_faults_fails_naming_each_with_its_fix(images):
    lines: list[str] = []
    probe = RecordedProbe(probe_files={"3150BBB": "probe_b210_usb2.txt",
                                       "3150CCC": "probe_b210_old_fpga.txt"},
                          bench={"3150AAA": "benchmark_tx_underflow.txt"},
                          governors=["powersave", "powersave"], rt=(1000, 0), images=images)
    rc = preflight.run(uhd_cfg(), probe, out=lines.append)
    text = "\n".join(lines)
    assert rc == 1
    rows = {(m.group(1), m.group(2)): m.group(3) for m in
            re.finditer(r"^(\S+(?: \S+)?)\s+(\S+)\s+(pass|FAIL)\s", text, re.M)}
    assert rows[("benchmark", "phy.uhd.ap")] == "FAIL"
    assert rows[("link", "devices[0].uhd")] == "FAIL"
    assert rows[("image", "devices[1].uhd")] == "FAIL"
    assert ("benchmark", "devices[1].uhd") not in rows  # not benchmarked with a bad image
    assert rows[("governor", "host")] == "FAIL" and rows[("rt priority", "host")] == "FAIL"
    assert rows[("benchmark", "devices[2].uhd")] == "pass"
    assert "fix:    uhd_images_downloader -t b2xx_b210_fpga_default" in text
    assert "fix:    cpupower frequency-set -g performance" in text
    assert text.splitlines()[-1] == "oppsched preflight: 23 passed, 5 failed"


def test_without_radios_preflight_says_what_is_missing_and_exits_nonzero():
    class NoRadio(RecordedProbe):
        def find_devices(self):
            return data("find_devices_none.txt"), 1

    lines: list[str] = []
    errs: list[str] = []
    assert preflight.run(uhd_cfg(), NoRadio(), out=lines.append, err=errs.append) == 1
    (msg,) = errs
    assert msg.startswith("oppsched preflight: no UHD device found")
    # the profiles and the host are still checked
    (text,) = lines
    assert len(re.findall(r"^profile\s+\S+\s+pass\s+b210: 1e\+06 S/s", text, re.M)) == 4
    assert re.search(r"^governor\s+host\s+pass", text, re.M) and "found" not in text
    for field, serial in zip(["phy.uhd.ap", "devices[0].uhd", "devices[1].uhd",
                              "devices[2].uhd"], SERIALS):
        assert f"{field} (USRP B210, args 'type=b200,serial={serial}')" in msg


def test_without_uhd_host_preflight_names_the_missing_tool(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    errs: list[str] = []
    assert preflight.run(uhd_cfg(), preflight.Probe(), out=lambda t: None,
                         err=errs.append) == 1
    assert errs == ["oppsched preflight: uhd_find_devices not found (apt-get install uhd-host): "
                    "it lists the radios; without it no radio can be checked"]


def test_preflight_on_this_host_finds_no_radio_with_the_real_uhd_find_devices():
    require(shutil.which("uhd_find_devices") is not None,
            "uhd_find_devices is not installed (apt-get install uhd-host)")
    from oppsched import uhd_sim

    with uhd_sim.discovery_lock():  # not while test_uhd_sim's simulated E320 answers
        found = subprocess.run(["uhd_find_devices"], capture_output=True, text=True,
                               timeout=60)
        if preflight.parse_find_devices(found.stdout):
            pytest.skip("this host has a USRP attached")
        r = run_cli("preflight", UHD_EXP, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "oppsched preflight: no UHD device found (uhd_find_devices lists none); missing: " \
           "phy.uhd.ap (USRP B210, args 'type=b200,serial=3150AAA')" in r.stderr
    assert "devices[2].uhd (USRP B210, args 'type=b200,serial=3150DDD')" in r.stderr


def test_out_of_profile_settings_are_rows_of_the_table_with_their_fix(images):
    with devices.profile_checks_deferred():
        cfg = uhd_cfg(["phy.uhd.ap.gain_db=95"])
    with pytest.raises(ConfigError, match="phy.uhd.ap.gain_db: 95.0 is outside"):
        uhd_cfg(["phy.uhd.ap.gain_db=95"])  # outside preflight: refused at once
    lines: list[str] = []
    probe = RecordedProbe(images=images)
    assert preflight.run(cfg, probe, out=lines.append) == 1
    text = "\n".join(lines)
    assert re.search(r"^profile\s+phy.uhd.ap\s+FAIL\s+phy.uhd.ap.gain_db: 95.0 is outside the "
                     r"b210's TX gain range 0..89.75 dB$", text, re.M), text
    assert "fix:    set it within the b210's limits (firmware/profiles/b210.yaml), or name the " \
           "radio's own profile in phy.uhd.device" in text
    # no benchmark at settings the device cannot take; the others are benchmarked
    assert [c[1] for c in probe.calls if c[0] == "benchmark"] == [
        f"type=b200,serial={s}" for s in SERIALS[1:]]


def test_with_a_medium_over_the_air_each_radios_second_direction_is_a_row_too(images):
    pps = ["medium.mode=node_fair", "phy.uhd.ap.time_source=external"] + [
        f"devices[{i}].uhd.time_source=external" for i in range(3)]
    with devices.profile_checks_deferred():
        cfg = uhd_cfg(pps + ["devices[1].uhd.tx_antenna=RX2"])
        plain = uhd_cfg(["devices[1].uhd.tx_antenna=RX2"])  # no medium: never transmits
    lines: list[str] = []
    assert preflight.run(cfg, RecordedProbe(images=images), out=lines.append) == 1
    text = "\n".join(lines)
    assert re.search(r"^profile\s+devices\[1\].uhd\s+FAIL\s+devices\[1\].uhd.tx_antenna: 'RX2' "
                     r"is not a b210 TX port \(TX/RX\)$", text, re.M), text
    lines = []
    preflight.run(plain, RecordedProbe(images=images), out=lines.append)
    assert not re.search(r"^profile\s+\S+\s+FAIL", "\n".join(lines), re.M)


def test_the_cli_shows_out_of_profile_settings_even_without_radios():
    require(shutil.which("uhd_find_devices") is not None,
            "uhd_find_devices is not installed (apt-get install uhd-host)")
    r = run_cli("preflight", UHD_EXP, "--set", "devices[0].uhd.antenna=TX2", timeout=120)
    assert r.returncode == 1
    assert re.search(r"^profile\s+devices\[0\].uhd\s+FAIL\s+devices\[0\].uhd.antenna: 'TX2' is "
                     r"not a b210 RX port \(TX/RX, RX2\)$", r.stdout, re.M), r.stdout


def test_preflight_refuses_an_experiment_without_radios():
    r = run_cli("preflight", REPO / "experiments" / "clamp" / "fading-abstract.yaml")
    assert r.returncode == 2
    assert "phy.mode: 'abstract': preflight checks radios" in r.stderr
