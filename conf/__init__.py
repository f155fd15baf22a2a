"""Cluster description -> Slurm configuration, discovery and the topology model (see README.md).

Modules: ``description`` (read TOML), ``model`` (values), ``validate``, ``deployment`` (paths,
ports, preemption mode, Slurm version), ``gen_*`` and ``generate`` (pure renderers and the
pipeline), ``hostlist``, ``topology`` (cells for the planner and simulator), ``discover*``
(nvidia-smi/lscpu parsing and the subprocess adapter), ``parse_slurm`` (read generated files back),
``toml_out`` and ``cli`` (``hai-slurm conf``).
"""
