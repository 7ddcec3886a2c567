"""One session of UHD's Python API with a device (tools/tests/test_uhd_sim.py runs it against
UHD's device simulator, in a process of its own): sets and reads back the radio's settings
and time, receives a finite RX burst and a timed one, sends a timed TX burst, and prints
what it saw as one JSON line. With --phy, the UHD PHY's own device code instead
(oppsched.phy.uhd: find_devices, GNU Radio's usrp_sink/usrp_source opened and set up by
configure_radio, set_device_time).

usage: uhd_sim_client.py [--phy] DEVICE_ARGS
"""

import json
import sys
import time

import numpy as np

uhd = None  # UHD's own Python module, imported by main(): GNU Radio's gr-uhd (--phy) binds
            # the same C++ types and cannot be loaded beside it

RATE = 1e6
FREQ = 2.45e9
RX_GAIN, TX_GAIN = 30.0, 40.0
RX_ANT, TX_ANT = "RX2", "TX/RX"
SET_TIME = 5.0
RX_SAMPS = 5000
TIMED_RX_SAMPS, TIMED_RX_AT = 2000, 3.0
TX_SAMPS, TX_AT = 3000, 2.0


def rx_burst(usrp, cmd):
    """Issues cmd on a new RX streamer, receives until the burst ends, a gap of 0.5 s or an
    error; stops the stream and drops the streamer."""
    args = uhd.usrp.StreamArgs("fc32", "sc16")
    args.channels = [0]
    rx = usrp.get_rx_stream(args)
    md = uhd.types.RXMetadata()
    buf = np.zeros(rx.get_max_num_samps(), dtype=np.complex64)
    rx.issue_stream_cmd(cmd)
    got, first_time, eob, error = 0, None, False, None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        n = rx.recv(buf, md, 0.5)
        if n and first_time is None:
            first_time = md.time_spec.get_real_secs() if md.has_time_spec else False
        got += n
        if md.error_code != uhd.types.RXMetadataErrorCode.none:
            error = str(md.error_code).rsplit(".", 1)[-1]
            break
        if md.end_of_burst:
            eob = True
            break
    rx.issue_stream_cmd(uhd.types.StreamCMD(uhd.types.StreamMode.stop_cont))
    del rx
    return {"samples": got, "first_time": first_time, "end_of_burst": eob, "error": error}


def main(device_args):
    global uhd
    import uhd

    out = {}
    usrp = uhd.usrp.MultiUSRP(device_args)
    out["mboard"] = usrp.get_mboard_name()
    out["channels"] = [usrp.get_rx_num_channels(), usrp.get_tx_num_channels()]
    usrp.set_rx_rate(RATE, 0)
    usrp.set_tx_rate(RATE, 0)
    usrp.set_rx_freq(uhd.types.TuneRequest(FREQ), 0)
    usrp.set_tx_freq(uhd.types.TuneRequest(FREQ), 0)
    usrp.set_rx_gain(RX_GAIN, 0)
    usrp.set_tx_gain(TX_GAIN, 0)
    usrp.set_rx_antenna(RX_ANT, 0)
    usrp.set_tx_antenna(TX_ANT, 0)
    out["read_back"] = {
        "rx_rate": usrp.get_rx_rate(0), "tx_rate": usrp.get_tx_rate(0),
        "rx_freq": usrp.get_rx_freq(0), "tx_freq": usrp.get_tx_freq(0),
        "rx_gain": usrp.get_rx_gain(0), "tx_gain": usrp.get_tx_gain(0),
        "rx_antenna": usrp.get_rx_antenna(0), "tx_antenna": usrp.get_tx_antenna(0),
    }
    out["master_clock_rate"] = usrp.get_master_clock_rate()
    out["time_sources"] = list(usrp.get_time_sources(0))
    usrp.set_time_now(uhd.types.TimeSpec(SET_TIME))
    out["time_after_set"] = usrp.get_time_now().get_real_secs()

    cmd = uhd.types.StreamCMD(uhd.types.StreamMode.num_done)
    cmd.num_samps = RX_SAMPS
    cmd.stream_now = True
    out["rx"] = rx_burst(usrp, cmd)
    cmd = uhd.types.StreamCMD(uhd.types.StreamMode.num_done)
    cmd.num_samps = TIMED_RX_SAMPS
    cmd.stream_now = False
    cmd.time_spec = uhd.types.TimeSpec(TIMED_RX_AT)
    out["timed_rx"] = rx_burst(usrp, cmd)

    args = uhd.usrp.StreamArgs("fc32", "sc16")
    args.channels = [0]
    tx = usrp.get_tx_stream(args)
    md = uhd.types.TXMetadata()
    md.start_of_burst = True
    md.end_of_burst = True
    md.has_time_spec = True
    md.time_spec = uhd.types.TimeSpec(TX_AT)
    out["tx_sent"] = tx.send(np.full(TX_SAMPS, 0.5, dtype=np.complex64), md, 1.0)
    events = []
    amd = uhd.types.TXAsyncMetadata()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if tx.recv_async_msg(amd, 0.2):
            events.append(str(amd.event_code).rsplit(".", 1)[-1])
    out["tx_async"] = events
    del tx
    del usrp  # closes the device now (UHD unclaims it), not at interpreter exit
    print(json.dumps(out), flush=True)


def phy(device_args):
    from gnuradio import uhd as gr_uhd

    from oppsched.phy import uhd as phy_uhd

    out = {"found": phy_uhd.find_devices(device_args)}
    ap = {"origin": "phy.uhd.ap", "args": device_args, "freq_hz": FREQ, "gain_db": TX_GAIN,
          "antenna": TX_ANT, "bandwidth_hz": 0.0, "clock_source": "internal",
          "time_source": ""}
    sink = phy_uhd._open(lambda: gr_uhd.usrp_sink(
        device_args, gr_uhd.stream_args(cpu_format="fc32", channels=[0])), ap)
    phy_uhd.configure_radio(sink, ap["origin"], ap, RATE)
    out["ap"] = {"rate": sink.get_samp_rate(), "freq": sink.get_center_freq(0),
                 "gain": sink.get_gain(0), "antenna": sink.get_antenna(0)}
    out["time_set"] = phy_uhd.set_device_time(sink, ap, clock=lambda: 1234.5)
    out["time_read"] = sink.get_time_now().get_real_secs()
    try:
        phy_uhd.configure_radio(sink, ap["origin"], dict(ap, time_source="internal"), RATE)
        out["time_source_internal"] = None
    except RuntimeError as exc:
        out["time_source_internal"] = str(exc)
    del sink
    dev = dict(ap, origin="devices[0].uhd", gain_db=RX_GAIN, antenna=RX_ANT)
    source = phy_uhd._open(lambda: gr_uhd.usrp_source(
        device_args, gr_uhd.stream_args(cpu_format="fc32", channels=[0])), dev)
    phy_uhd.configure_radio(source, dev["origin"], dev, RATE)
    out["device"] = {"rate": source.get_samp_rate(), "freq": source.get_center_freq(0),
                     "gain": source.get_gain(0), "antenna": source.get_antenna(0)}
    del source
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--phy":
        phy(sys.argv[2])
    else:
        main(sys.argv[1])
