"""The PHY processes of a testbed run (docs/daemons.md): the clock master of the downlink.

- `python -m oppsched.phy.abstract --config phy.yaml`: the slot-level abstract PHY (SNR from
  the channel models, TB success from link curves or an end-of-slot rule); its models
  are oppsched.phy.models, its real-time driver (slot clock, sockets, signals)
  oppsched.phy.realtime.
- `python -m oppsched.phy.loopback` / `python -m oppsched.phy.uhd`: the gr-oppsched blocks,
  on an emulated channel or on USRPs.

What every PHY process shares (phy.yaml's schema and loading, the stats writer, real-time
priority, the command line) is in oppsched.phy.common.

Every PHY speaks the same ZeroMQ contract (slot_request/slot_grant with the AP daemon,
rx_indication to each client agent), so the daemons cannot tell them apart.
"""
