"""The names of the project's enumerations, each defined once.

Those the C++ defines come from the bindings (oppsched.mac: host/python/bind_names.cc and
the AQM bindings; gnuradio.oppsched: numerology.h), so that the C++ is their single source:
oppsched.generate writes them into oppsched._generated, read here, so that they are known
without a build (tools/tests/test_registry.py fails when that copy differs from the build's).
Those only Python implements are defined here. tools/tests/test_names.py checks that the two
sides agree.

Renamed values ("clamp" names the CLAMP algorithm only) stay accepted for a while:
the *_ALIASES maps give the new name of each old one, and oppsched.config takes the old
name as the new with a deprecation warning naming the field.
"""

from __future__ import annotations

from oppsched._generated import CONSTANTS as _CONSTANTS
from oppsched._generated import ENUMS as _ENUMS

# ---- from the C++ -----------------------------------------------------------------------
SCHEDULERS = tuple(_ENUMS["SCHEDULER_KINDS"])  # sched.h's policies (the apd's scheduler.kind)
AQM_KINDS = tuple(_ENUMS["AQM_KINDS"])  # aqm.h's aqm_kind
MARKING_AQMS = tuple(_ENUMS["MARKING_AQM_KINDS"])  # aqm.h's marks_ecn: these mark ECT packets
LINK_MODES = tuple(_ENUMS["LINK_MODES"])  # ap_core.h's link_mode (the apd's link_adaptation.mode)
MU_C_MODES = tuple(_ENUMS["MU_C_MODES"])  # ap_core.h's mu_c_mode (the apd's clamp.mu_c)
TABLE_PRESETS = tuple(_ENUMS["MCS_TABLE_NAMES"])  # ap_core.h: the tables the apd builds by name
FADING_MODELS = tuple(_ENUMS["FADING_MODELS"])  # what mac.fading_channel builds (fading.h)
PROFILES = tuple(_ENUMS["PROFILES"])  # numerology.h: the slot numerologies
FECS = tuple(_ENUMS["FECS"])  # numerology.h's fec_scheme
SHANNON_TABLE_DEFAULTS = dict(_CONSTANTS["SHANNON_TABLE_DEFAULTS"])  # eq. 18's W0, C_max, levels
PROFILE_SLOT_S = dict(_CONSTANTS["PROFILE_SLOT_S"])  # numerology.h: each profile's slot (s)
# the MAC library's constants the schemas use (its channel, PDU and wire headers)
CLAMP_MEAN_SNR_DB = _CONSTANTS["CLAMP_MEAN_SNR_DB"]
CLAMP_FAST_DOPPLER_HZ = _CONSTANTS["CLAMP_FAST_DOPPLER_HZ"]
CLAMP_ATTEMPTS_SLOW_FADING = _CONSTANTS["CLAMP_ATTEMPTS_SLOW_FADING"]
CLAMP_ATTEMPTS_FAST_FADING = _CONSTANTS["CLAMP_ATTEMPTS_FAST_FADING"]
PDU_COMPACT_MAX_WINDOW = _CONSTANTS["PDU_COMPACT_MAX_WINDOW"]
JAKES_GENERATORS = _CONSTANTS["JAKES_GENERATORS"]
USER_NOBODY = _CONSTANTS["USER_NOBODY"]  # wire.h: rx_indication.user of an empty slot

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
