"""Reading what a run recorded: pcaps, SigMF recordings, shared metrics, the run's
timeline and its report page."""
