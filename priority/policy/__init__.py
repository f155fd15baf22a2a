"""The pure policy: classes' ladder, aging, decay, fairness, quotas, scoring and explanations.

Everything here is a function of its arguments (time passed in): no database, Slurm command,
clock or other I/O is imported (``tests/unit/test_layers.py`` enforces it).
"""
