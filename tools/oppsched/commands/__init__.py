"""The `oppsched` verbs that only the command line reaches (oppsched.cli dispatches them):
linkcurves and mcstable, linkgap, tcpview, decode, bench, preflight, plugin check/new.

Nothing outside this package imports it but oppsched.cli (tools/tests/test_package_layout.py).
"""
