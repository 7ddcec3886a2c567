"""Not imported as a package when in use: this folder goes on PYTHONPATH of the simulator's
processes (oppsched.uhd_sim.environment()), where `usrp_hwd` (the launcher),
`sitecustomize` (installs the shims), `oppsched_mpm_shims` and `oppsched_sim_samples` are
top-level modules. It is a package only so that an installed copy of oppsched carries it."""
