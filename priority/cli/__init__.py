"""The ``hai-slurm`` command groups of the daemon side: config, priority, daemon, preempt."""
