"""The names of the project's enumerations, each defined once.

Those the C++ defines come from the bindings (oppsched.mac: host/python/bind_names.cc and
the AQM bindings; gnuradio.oppsched: numerology.h), so that the C++ is their single source;
those only Python implements are defined here. tools/tests/test_names.py checks that the two
sides agree.

Renamed values ("clamp" names the CLAMP algorithm only) stay accepted for a while:
the *_ALIASES maps give the new name of each old one, and oppsched.config takes the old
name as the new with a deprecation warning naming the field.
"""

from __future__ import annotations

from gnuradio import oppsched as _phy

from oppsched import mac

# ---- from the C++ -----------------------------------------------------------------------
SCHEDULERS = tuple(mac.SCHEDULER_KINDS)  # sched.h's policies (the apd's scheduler.kind)
AQM_KINDS = tuple(mac.AQM_KINDS)  # aqm.h's aqm_kind
MARKING_AQMS = tuple(mac.MARKING_AQM_KINDS)  # aqm.h's marks_ecn: these mark ECT packets
LINK_MODES = tuple(mac.LINK_MODES)  # ap_core.h's link_mode (the apd's link_adaptation.mode)
MU_C_MODES = tuple(mac.MU_C_MODES)  # ap_core.h's mu_c_mode (the apd's clamp.mu_c)
TABLE_PRESETS = tuple(mac.MCS_TABLE_NAMES)  # ap_core.h: the MCS tables the apd builds by name
SHANNON_TABLE_DEFAULTS = dict(mac.SHANNON_TABLE_DEFAULTS)  # eq. 18's W0, C_max and levels
FADING_MODELS = tuple(mac.FADING_MODELS)  # what oppsched.mac.fading_channel builds (fading.h)
PROFILES = tuple(_phy.numerology.profile_names())  # numerology.h: the slot numerologies
FECS = tuple(_phy.fec_names())  # numerology.h's fec_scheme

# ---- Python only --------------------------------------------------------------------------
# The abstract PHY's channel models: the fading models plus a replayed SNR trace and a
# constant SNR; its error models (oppsched.phy.abstract).
CHANNEL_MODELS = FADING_MODELS + ("trace", "awgn")
ERROR_MODELS = ("curves", "threshold", "end_of_slot")

# ---- old names ----------------------------------------------------------------------------
PROFILE_ALIASES = {"clamp": "3ms"}
CHANNEL_MODEL_ALIASES = {"clamp": "jakes"}
ERROR_MODEL_ALIASES = {"clamp": "end_of_slot"}
TABLE_ALIASES = {"clamp": "shannon"}
