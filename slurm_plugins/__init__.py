"""See the package docstring of hai_slurm."""
