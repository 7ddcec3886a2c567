"""Turns slot_rx's per-slot dicts into PDUs a QT GUI sink can plot.

Port ``rx`` in; ports ``snr`` and ``bler`` out: every ``every`` reports, a PDU
(meta: empty dict, f32vector) with the last ``history`` values of the effective SNR (dB)
and of the block error rate over the last ``window`` TBs addressed to this client
(``qtgui_time_sink_f`` with type msg_float draws each PDU as one trace, so the plot is a
sliding history). Slots not detected count as -30 dB.
"""

import collections

import numpy as np
import pmt
from gnuradio import gr


class rx_monitor(gr.basic_block):
    def __init__(self, history=500, window=100, every=10):
        gr.basic_block.__init__(self, name="rx_monitor", in_sig=None, out_sig=None)
        if history < 1 or window < 1 or every < 1:
            raise ValueError("rx_monitor: history, window and every must be >= 1")
        self.snr = collections.deque([np.nan] * history, maxlen=history)
        self.bler = collections.deque([np.nan] * history, maxlen=history)
        self.outcomes = collections.deque(maxlen=window)
        self.every = every
        self.count = 0
        self.message_port_register_in(pmt.intern("rx"))
        self.message_port_register_out(pmt.intern("snr"))
        self.message_port_register_out(pmt.intern("bler"))
        self.set_msg_handler(pmt.intern("rx"), self._on_rx)

    def _get(self, msg, key, default):
        v = pmt.dict_ref(msg, pmt.intern(key), pmt.PMT_NIL)
        return default if pmt.eq(v, pmt.PMT_NIL) else pmt.to_python(v)

    def _on_rx(self, msg):
        if not pmt.is_dict(msg):
            return
        self.snr.append(float(self._get(msg, "effective_snr_db", -30.0)))
        if self._get(msg, "addressed", False) and self._get(msg, "tb_bytes", 0) > 0:
            self.outcomes.append(0.0 if self._get(msg, "crc_ok", False) else 1.0)
        self.bler.append(float(np.mean(self.outcomes)) if self.outcomes else np.nan)
        self.count += 1
        if self.count % self.every:
            return
        for port, values in (("snr", self.snr), ("bler", self.bler)):
            v = np.nan_to_num(np.asarray(values, dtype=np.float32), nan=0.0)
            self.message_port_pub(
                pmt.intern(port), pmt.cons(pmt.make_dict(), pmt.init_f32vector(len(v), v.tolist()))
            )
