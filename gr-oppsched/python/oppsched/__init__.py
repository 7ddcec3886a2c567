"""gnuradio.oppsched: the oppsched PHY (slotted OFDM downlink, HARQ, CQI, channel emulator)."""

from .oppsched_python import *  # noqa: F401,F403
