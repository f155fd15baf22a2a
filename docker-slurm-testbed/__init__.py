"""A real multi-node Slurm cluster with fake GPUs, as local processes or Docker containers."""
