"""The preemption executor: carries a planner's plan out on Slurm, step by step in the store.

Requests (checkpoint signals, optional Redis notices), the requeue guard, late acknowledgements.
"""
