"""trace_diagnose: from agent trajectories to a capability diagnosis (TRACE stage 1)."""
