"""hai-slurm: checkpoint-then-requeue preemption and priority classes on Slurm.

Sub-packages (each a root folder of the repository, mapped here by ``package_dir``):

- ``hai_slurm.priority``      the daemon's policy, planner and state (``priority/``)
- ``hai_slurm.checkpoint``    the job-side library, standard library only (``checkpoint/``)
- ``hai_slurm.conf``          cluster description and configuration generators (``conf/``)
- ``hai_slurm.slurm_plugins`` job_submit.lua and the Slurm adapter (``slurm_plugins/``)
- ``hai_slurm.testbed``       the real multi-node test cluster (``docker-slurm-testbed/``)

Importing this package imports nothing else, so the job side stays dependency free.
"""

__version__ = "0.1.0"
