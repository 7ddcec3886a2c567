"""A testbed run's machinery: network namespaces and processes (netns), the wired paths
(links) and the topology built of them (wired), the daemons' configuration files
(daemonconf), flows and transfers, the WRC flows, the chaos proxy, per-testbed keys, and
the small helpers run inside namespaces.
"""
