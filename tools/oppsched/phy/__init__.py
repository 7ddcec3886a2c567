"""The PHY processes of a testbed run (docs/daemons.md): the clock master of the downlink.

- `python -m oppsched.phy.abstract --config phy.yaml`: the slot-level abstract PHY (SNR from
  the channel models, TB success from link curves or the CLAMP slot error model).

Every PHY speaks the same ZeroMQ contract (SlotRequest/SlotGrant with the AP daemon,
RxIndication to each client agent), so the daemons cannot tell them apart.
"""
