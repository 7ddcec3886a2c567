"""A stand-in for the AP daemon inside one flowgraph: answers slot_tx's requests with grants.

For demonstrations and link tests without oppsched-apd (the QT example flowgraph, BLER
measurements): each request {slot} gets a grant for user ``slot % num_users`` (round
robin) with a new TB of random bytes (seeded) at that user's MCS, HARQ process
``slot % harq_processes`` and the NDI of that (user, process) toggled, so every slot carries
new data. ``empty_every`` > 0 leaves every such slot empty. There is no HARQ feedback: a
slot that went out late (its TB never sent) makes the next TB of that process look like a
retransmission to the receiver, which then fails once (the 1-bit NDI ambiguity a real MAC
resolves with feedback); more processes make that rarer. It has the same ports as mac_grant_source (``request``
in, ``grant`` out), so the two are interchangeable in a flowgraph.
"""

import numpy as np
import pmt
from gnuradio import gr

from .oppsched_python import mcs_set, numerology


class grant_generator(gr.basic_block):
    """Fake MAC: request dicts in, grant dicts out (see the module docstring).

    profile, sample_rate (Hz): the numerology (TB sizes); num_users: users served round
    robin; mcs: one MCS 0..7 for all users or a list per user; fill: TB size as a fraction
    (0, 1] of what the MCS carries; harq_processes: 1..16; empty_every: 0 or N (every N-th
    slot empty); seed: TB bytes.
    """

    def __init__(
        self,
        profile="evdo",
        sample_rate=1e6,
        num_users=1,
        mcs=4,
        fill=1.0,
        harq_processes=1,
        empty_every=0,
        seed=0,
    ):
        gr.basic_block.__init__(self, name="grant_generator", in_sig=None, out_sig=None)
        if not isinstance(num_users, int) or num_users < 1:
            raise ValueError(f"grant_generator.num_users: {num_users!r} must be >= 1")
        mcs_list = list(mcs) if isinstance(mcs, (list, tuple)) else [mcs] * num_users
        if len(mcs_list) != num_users:
            raise ValueError(f"grant_generator.mcs: {len(mcs_list)} values for {num_users} users")
        for m in mcs_list:
            if not isinstance(m, int) or not 0 <= m < mcs_set.size:
                raise ValueError(f"grant_generator.mcs: {m!r} not in [0,7]")
        if not 0 < fill <= 1:
            raise ValueError(f"grant_generator.fill: {fill!r} not in (0,1]")
        if not 1 <= harq_processes <= 16:
            raise ValueError(f"grant_generator.harq_processes: {harq_processes!r} not in [1,16]")
        num = numerology.profile(profile, sample_rate)
        self.num_users = num_users
        self.mcs = mcs_list
        self.tb_bytes = [max(1, int(fill * mcs_set.tb_bytes(m, num))) for m in mcs_list]
        self.harq_processes = harq_processes
        self.empty_every = int(empty_every)
        self.rng = np.random.default_rng(seed)
        self.ndi = {}  # (user, harq process) -> NDI of its last TB
        self.sent = {}  # slot -> (user, tb bytes), the last 4096 slots (for tests)
        self.message_port_register_in(pmt.intern("request"))
        self.message_port_register_out(pmt.intern("grant"))
        self.set_msg_handler(pmt.intern("request"), self._on_request)

    def _on_request(self, msg):
        if not pmt.is_dict(msg):
            return
        slot_p = pmt.dict_ref(msg, pmt.intern("slot"), pmt.PMT_NIL)
        if not (pmt.is_uint64(slot_p) or pmt.is_integer(slot_p)):
            return
        slot = pmt.to_uint64(slot_p) if pmt.is_uint64(slot_p) else pmt.to_long(slot_p)
        d = pmt.make_dict()
        d = pmt.dict_add(d, pmt.intern("slot"), pmt.from_uint64(slot))
        if self.empty_every and slot % self.empty_every == 0:
            d = pmt.dict_add(d, pmt.intern("empty"), pmt.PMT_T)
        else:
            u = slot % self.num_users
            pid = slot % self.harq_processes
            ndi = self.ndi[(u, pid)] = not self.ndi.get((u, pid), False)  # new TB: toggle
            tb = self.rng.integers(0, 256, self.tb_bytes[u], dtype=np.uint8)
            self.sent[slot] = (u, bytes(tb))
            if len(self.sent) > 4096:
                self.sent.pop(next(iter(self.sent)))
            for k, v in (
                ("user", pmt.from_long(u)),
                ("mcs", pmt.from_long(self.mcs[u])),
                ("harq_pid", pmt.from_long(pid)),
                ("ndi", pmt.from_bool(ndi)),
                ("rv", pmt.from_long(0)),
                ("tb", pmt.init_u8vector(len(tb), tb.tolist())),
            ):
                d = pmt.dict_add(d, pmt.intern(k), v)
        self.message_port_pub(pmt.intern("grant"), d)
