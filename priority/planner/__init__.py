"""The pure preemption planner: topology-aware placement, victim search, and its inputs.

Like :mod:`hai_slurm.priority.policy`, it imports no database, Slurm command or I/O.
"""
