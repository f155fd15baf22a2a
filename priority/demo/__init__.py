"""The preemption demo's pieces: toy training jobs on a real cluster, and their figures."""
