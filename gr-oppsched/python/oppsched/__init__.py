"""gnuradio.oppsched: the oppsched PHY (slotted OFDM downlink, HARQ, CQI, channel emulator)."""

from .oppsched_python import *  # noqa: F401,F403
from .emulator_config import emulator_params  # noqa: F401
from .grant_generator import grant_generator  # noqa: F401
from .rx_monitor import rx_monitor  # noqa: F401
