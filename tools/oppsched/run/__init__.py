"""`oppsched run` and `oppsched sweep`: experiment files in, results folders out (runner),
sweeps and their points (sweep, sweepspec), a sweep's table and report (sweep_results),
runs side by side (forkpool), the results folder's lock (outlock), and the live
`--metrics` endpoint (live, livepage, cluster_worker).
"""
