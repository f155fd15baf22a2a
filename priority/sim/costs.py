"""What a preemption costs, in simulated seconds (all integers, so runs are exact).

* checkpoint time when asked to save: ``checkpoint_base + checkpoint_per_gpu * GPUs`` (bigger
  jobs hold more state);
* restart overhead: every run after a requeue spends ``restart_base + restart_per_node * nodes``
  loading the checkpoint before it makes progress again;
* Slurm's requeue delay: a requeued job may start again ``requeue_delay`` s later
  (``cred_expire`` + 1, 11 s with Slurm's default);
* policies that kill (slurm-multifactor) lose the work since the job's last *periodic* checkpoint,
  taken every ``checkpoint_interval`` s of progress; ``grace_time`` is Slurm's GraceTime between
  the preemption signal and the kill;
* a job that cannot save on request (``TraceJob.saves`` False: no ``#HAI --checkpoint-dir``)
  asked to give way by a policy that asks (hai-slurm, hai-platform) holds its GPUs for
  ``no_save_stop`` s and is requeued: it loses the work since its last periodic checkpoint, as
  a killed job does. Without a handler the request's SIGUSR2 ends its step at once, and the
  executor requeues it about 1 s later (measured on the testbed, Slurm 22.05: 1.1 s from the
  request to the requeue, rounded up here to 2). A job that ignores requests runs on until its
  deadline instead (``#HAI --grace``, else the executor's ``default_grace``, 60 s): set
  ``no_save_stop`` to that to model such jobs.

A plan's victims are all requeued after the slowest one's time (the policies pass the engine
one delay per plan): the beneficiary needs all of them, and the executor requeues a plan's
victims together. A simplification: a victim that cannot save, in a plan with one that saves,
counts as holding its GPUs until then, where on a cluster its step has ended and its GPUs sit
idle behind the plan's guard.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CostModel:
    """Preemption costs (see the module docstring). Seconds."""

    checkpoint_base: int = 30
    checkpoint_per_gpu: int = 5
    restart_base: int = 60
    restart_per_node: int = 10
    requeue_delay: int = 11
    checkpoint_interval: int = 3600
    grace_time: int = 120
    no_save_stop: int = 2

    def checkpoint_time(self, gpus: int) -> int:
        """Seconds a job of ``gpus`` GPUs needs to write a checkpoint on request."""
        return self.checkpoint_base + self.checkpoint_per_gpu * gpus

    def restart_time(self, nodes: int) -> int:
        """Seconds a restarted job spends before it makes progress again."""
        return self.restart_base + self.restart_per_node * max(1, nodes)

    def saved_by_periodic(self, progress: int) -> int:
        """Progress kept by periodic checkpoints when a job that made ``progress`` is killed."""
        if self.checkpoint_interval <= 0:
            return 0
        return progress // self.checkpoint_interval * self.checkpoint_interval
