"""Trace-driven simulator: replay GPU-cluster traces through the daemon's own policy and planner.

See :mod:`hai_slurm.priority.sim.engine` for the event loop, :mod:`.trace` for the trace formats
and :mod:`.policies` for the four policies compared (fifo, slurm-multifactor, hai-platform,
hai-slurm).
"""
