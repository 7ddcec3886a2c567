"""One USRP's settings: the schema shared by the UHD PHY's phy.yaml (oppsched.phy.uhd:
`uhd.ap`, `users[i].uhd`) and the experiment (testbed.py: `phy.uhd.ap`, `devices[i].uhd`).
Only oppsched.config here, so the experiment schema loads without GNU Radio or the MAC.
"""

from __future__ import annotations

import re

from oppsched.config import ConfigError, Field

# uhd::usrp::multi_usrp clock/time sources; "" = leave the device's default.
SOURCES = ("", "internal", "external", "gpsdo", "mimo")
_ARGS_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[^,=\s]+(,[A-Za-z_][A-Za-z0-9_]*=[^,=\s]+)*")


def check_args(v: str) -> str | None:
    """UHD device args: '' (unset) or key=value[,key=value...] (e.g. type=b200,serial=X)."""
    if v == "" or _ARGS_RE.fullmatch(v):
        return None
    return "is not UHD device args key=value[,key=value...] (e.g. 'type=b200,serial=30F1A2B')"


def check_profile_name(v: str) -> str | None:
    return None if re.fullmatch(r"[a-z0-9_]{0,24}", v) else \
        "is not a device profile name (firmware/profiles/<name>.yaml)"


def _antenna(v: str) -> str | None:
    return None if re.fullmatch(r"[A-Za-z0-9/_+-]{1,32}", v) else "is not an antenna name"


def tx_backoff(what: str) -> Field:
    """A transmitting radio's backoff: the samples it sends scaled by 10^(-x/20) before
    UHD (slot_tx's OFDM has unit mean power, peaks about 2.6; UHD's fc32 full scale is 1.0:
    at 0 dB a third of the I and Q values clip; 10 dB leaves a sample beyond it with
    probability about e^-10)."""
    return Field(float, 10.0, min=0.0, max=40.0,
                 doc=f"{what}: the samples sent are scaled by 10^(-x/20) before UHD, within "
                     "its fc32 full scale of 1.0 (slot_tx's OFDM has unit mean power)")


# One radio's settings, shared by phy.yaml and the experiment schema (testbed.py).
RADIO_COMMON = {
    "args": Field(str, "", check=check_args,
                  doc="UHD device args (uhd_find_devices --args); required"),
    "device": Field(str, "", check=check_profile_name,
                    doc="its profile in firmware/profiles (b210, n210, ...); '' = phy.uhd.device"),
    "gain_db": Field(float, 40.0, min=0.0, max=100.0, doc="plain dB (the device's range)"),
    "bandwidth_hz": Field(float, 0.0, min=0.0, max=200e6, doc="analog filter; 0 = default"),
    "clock_source": Field(str, "", choices=SOURCES, doc="10 MHz reference; '' = default"),
    "time_source": Field(str, "", choices=SOURCES,
                         doc="PPS; external/gpsdo: device time set at the next PPS"),
}
RADIO_AP = {
    **RADIO_COMMON,
    "freq_hz": Field(float, 2.45e9, min=10e6, max=6e9, doc="centre frequency"),
    "gain_db": Field(float, 50.0, min=0.0, max=100.0, doc="TX gain, plain dB"),
    "antenna": Field(str, "TX/RX", check=_antenna),
    "tx_backoff_db": tx_backoff("the AP's transmission"),
    "start_delay_s": Field(float, 2.0, min=0.1, max=60.0,
                           doc="the lead: slot 0 at device time T + start_delay_s, T the "
                               "whole second the device time was set to"),
    # The AP's receiver of the stations' uplink slots (a medium over the air: TDD)
    "rx_gain_db": Field(float, 40.0, min=0.0, max=100.0,
                        doc="RX gain for the uplink slots (with a medium), plain dB"),
    "rx_antenna": Field(str, "RX2", check=_antenna, doc="RX port for the uplink slots"),
}
RADIO_CLIENT = {
    **RADIO_COMMON,
    "freq_hz": Field((float, type(None)), None, min=10e6, max=6e9, doc="null: uhd.ap's"),
    "antenna": Field(str, "RX2", check=_antenna),
    # The station's own uplink slots (a medium over the air: TDD)
    "tx_gain_db": Field(float, 50.0, min=0.0, max=100.0,
                        doc="TX gain for its uplink slots (with a medium), plain dB"),
    "tx_antenna": Field(str, "TX/RX", check=_antenna, doc="TX port for its uplink slots"),
    "tx_backoff_db": tx_backoff("its uplink slots (with a medium)"),
}
# The settings of a radio's second direction, used only with uplink slots over the air:
# role -> (gain key, antenna key). The AP's first direction is tx, a client's rx.
SECOND_DIRECTION = {"rx": ("rx_gain_db", "rx_antenna"), "tx": ("tx_gain_db", "tx_antenna")}
# Time sources that give every radio the same time base (a common PPS): uplink slots over
# the air need them, since each station's burst goes out at the AP's tx_time.
COMMON_TIME_SOURCES = ("external", "gpsdo", "mimo")


def check_common_time(radios: list[tuple[str, dict]], when: str) -> None:
    """With uplink slots over the air every radio must take its time from a common PPS
    (external, gpsdo, mimo); ConfigError naming the first radio that does not."""
    for field, r in radios:
        if r["time_source"] not in COMMON_TIME_SOURCES:
            raise ConfigError(
                f"{field}.time_source: {r['time_source'] or 'the default'!r}{when}: every "
                f"radio needs a common time base ({', '.join(COMMON_TIME_SOURCES)}: a shared "
                "PPS), since each station sends its uplink slot at the AP's tx_time "
                "(docs/testbed.md, \"Uplink slots over the air\")")


def whole_hz(v: float) -> str | None:
    return None if v == int(v) else "is not whole Hz (tx_time is exact in integer samples)"


def check_radio_args(radios: list[tuple[str, dict]], when: str = "") -> None:
    """Every radio (field, settings) has args, and no two name the same device (the same
    key=value pairs in any order); ConfigError naming the field and the value."""
    seen: dict[str, str] = {}
    for field, r in radios:
        if not r["args"]:
            raise ConfigError(f"{field}.args: required{when} (the radio's UHD device args, "
                              "e.g. 'type=b200,serial=30F1A2B')")
        key = ",".join(sorted(r["args"].split(",")))
        if key in seen:
            raise ConfigError(f"{field}.args: {r['args']!r} names the same device as "
                              f"{seen[key]}.args; every radio needs its own (serial=...)")
        seen[key] = field
