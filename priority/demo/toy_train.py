"""A deterministic toy training job (pure Python, CPU only) that uses the checkpoint library.

Used by the demo, the preemption tests and the benchmark; run it as a Slurm batch job::

    #HAI --checkpoint-dir=/shared/ck/run1
    srun python -m hai_slurm.priority.demo.toy_train --steps 300 --out /shared/result.json

With several ranks (``-N2``: one task per node) every rank trains and answers requests, and only
rank 0 writes ``--out`` and ``--progress``.

Each step draws from Python's ``random`` (whose state the library saves and restores) and folds
the value into a running weight and a sha256 chain, so a run that was preempted and resumed any
number of times writes a result bit-identical to an uninterrupted run (``--reference`` computes
that one without Slurm or sleeps). Every step appends ``<run> <step>`` to ``--progress`` (when
given), from which "steps lost" is measured: the highest step a run reached minus the step the
next run resumed from.

On a checkpoint request (USR2 from the executor, SIGTERM from Slurm) it saves at the next step
boundary and either acknowledges and exits 75 (``--on-request exit``, the default) or
acknowledges and keeps training until Slurm actually requeues it (``--on-request continue``:
the requeue's SIGTERM then saves again and exits 75). ``--ignore-requests`` simulates a job that
never answers USR2; ``--save-seconds`` makes each save take that long (the phase shows
``saving`` meanwhile); ``--save-every K`` adds periodic saves; ``--fail-save-on-run N`` makes
the requested save of run N fail in the kernel (a file size limit: EFBIG, as a full disk) so the
job exits 1. Each save prints ``saved STEP``; a save that fails for real (a full disk) prints
``save failed at step S (run N): ...; the previous checkpoint (step P, FILE) is still valid``
and the job exits 1. With ``--ignore-requests`` SIGTERM
kills the job at once (its default action), as it would a job without the library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

SEED = 2026


class SlowToPickle:
    """A state member whose serialization takes ``seconds`` (a large model, in miniature)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __reduce__(self) -> tuple[type[SlowToPickle], tuple[float]]:
        time.sleep(self.seconds)
        return (SlowToPickle, (self.seconds,))


def fresh(save_seconds: float) -> dict[str, Any]:
    """Step 0: the seeded generator and an empty history."""
    random.seed(SEED)
    return {"step": 0, "w": 0.0, "chain": "", "slow": SlowToPickle(save_seconds)}


def one_step(state: dict[str, Any]) -> None:
    """One deterministic update."""
    x = random.random()  # noqa: S311 - a reproducible toy, not cryptography
    state["w"] = state["w"] * 0.97 + x * random.gauss(0.0, 1.0)
    state["chain"] = hashlib.sha256(f"{state['chain']}{state['w']!r}".encode()).hexdigest()
    state["step"] += 1


def result(state: dict[str, Any]) -> dict[str, Any]:
    """What the job writes at the end (the next draw proves the RNG state matches too)."""
    return {"steps": state["step"], "w": state["w"], "chain": state["chain"],
            "next": random.random()}  # noqa: S311 - reproducible by design


def reference(steps: int) -> dict[str, Any]:
    """The result of an uninterrupted run, computed in-process."""
    state = fresh(0.0)
    for _ in range(steps):
        one_step(state)
    return result(state)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hai_slurm.priority.demo.toy_train",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--out", required=True, help="where the result JSON goes")
    p.add_argument("--progress", help="file to append '<run> <step>' to after each step")
    p.add_argument("--save-every", type=int, default=0, help="periodic save every K steps")
    p.add_argument("--save-seconds", type=float, default=0.0, help="artificial save duration")
    p.add_argument("--on-request", choices=("exit", "continue"), default="exit")
    p.add_argument("--fail-save-on-run", type=int, default=None, metavar="N",
                   help="in run N, the requested save hits a file size limit (the kernel's "
                   "EFBIG, like a full disk: the library says older checkpoints are untouched) "
                   "and the job exits 1")
    p.add_argument("--ignore-requests", action="store_true",
                   help="never answer USR2; SIGTERM kills at once (no save)")
    p.add_argument("--reference", action="store_true", help="uninterrupted run, no library")
    return p


def _failing_save(ck: Any, state: dict[str, Any]) -> int:
    """Save under a 64-byte file size limit (SIGXFSZ ignored, so the write fails with EFBIG as
    a full disk fails with ENOSPC); report the library's error and exit 1, as a training
    script whose save fails would."""
    import resource

    from hai_slurm.errors import CheckpointError

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, before[1]))
    try:
        ck.save(state)
    except CheckpointError as err:
        resource.setrlimit(resource.RLIMIT_FSIZE, before)
        print(f"save failed: {err}", flush=True)
        return 1
    resource.setrlimit(resource.RLIMIT_FSIZE, before)
    print("save did not fail under the file size limit", flush=True)
    return 2


def _save(ck: Any, state: dict[str, Any], run: int) -> bool:
    """Save; print ``saved STEP``, or on a failure (a full disk, say) one line saying so and
    which checkpoint is still valid, and return False (the caller exits 1)."""
    from hai_slurm.errors import CheckpointError

    try:
        ck.save(state)
    except CheckpointError as err:
        last = ck.last_checkpoint
        kept = (f"the previous checkpoint (step {last.step}, {last.file}) is still valid and "
                "the next run resumes from it" if last is not None else
                "no earlier checkpoint exists: the next run starts from step 0")
        print(f"save failed at step {state['step']} (run {run}): {err}; {kept}", flush=True)
        return False
    print(f"saved {state['step']}", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    """Train, answering checkpoint requests; return the exit code."""
    args = _parser().parse_args(argv)
    if args.reference:
        Path(args.out).write_text(json.dumps(reference(args.steps)))
        return 0
    from hai_slurm.checkpoint import Checkpointer

    ck = Checkpointer.from_env(save_every_steps=args.save_every or None)
    if args.ignore_requests:  # SIGTERM kills at once, as in a job without the library
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    state = ck.load_latest() or fresh(args.save_seconds)
    state["slow"] = SlowToPickle(args.save_seconds)
    run = ck.env.restart_count
    print(f"start {state['step']} run {run}", flush=True)
    writer = ck.is_writer  # rank 0
    progress = (Path(args.progress).open("a")  # noqa: SIM115
                if args.progress and writer else None)
    acked_at: int | None = None
    while state["step"] < args.steps:
        one_step(state)
        time.sleep(args.step_seconds)
        if progress is not None:
            progress.write(f"{run} {state['step']}\n")
            progress.flush()
        if args.ignore_requests:
            ck.listener.clear()  # a USR2 request is never answered
        elif ck.requested():
            pending = ck.listener.pending()
            by_term = pending is not None and pending.signal == signal.SIGTERM
            if args.fail_save_on_run == run:
                return _failing_save(ck, state)
            if acked_at != state["step"] and not _save(ck, state, run):
                return 1
            if args.on_request == "continue" and not by_term:
                ck.acknowledge()  # keep training until Slurm requeues us (SIGTERM)
                acked_at = state["step"]
                print(f"acked {state['step']} (continuing)", flush=True)
                continue
            print(f"acked {state['step']} (exiting)", flush=True)
            ck.acknowledge_and_exit()
        if ck.due(state["step"]) and not _save(ck, state, run):
            return 1
    ck.close()
    if writer:
        tmp = Path(args.out + ".tmp")
        tmp.write_text(json.dumps(result(state)))
        tmp.replace(args.out)
        print(f"done {state['step']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
