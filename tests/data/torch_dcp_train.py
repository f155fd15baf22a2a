"""A tensor-parallel toy model trained with torch (CPU, gloo), checkpointed with DCP through
``Checkpointer.save_with``. Used by tests/unit/test_checkpoint_torch.py (local processes) and
tests/integration/test_torch_preemption.py (a 2-node x 2-task Slurm job launched with srun).

    python torch_dcp_train.py OUT_DIR TOTAL_STEPS [--async-every N] [--reference]

Each rank holds a slice of both layers of an MLP (rows of W1, columns of W2) and the Adam state of
that slice: no rank has the whole model. The checkpoint is a DCP checkpoint of DTensors
(``Shard(0)``/``Shard(1)`` over a 1-D CPU mesh), so each rank writes only its own shard. Batches
come from a DataLoader with one worker (``ignore_requests_in_worker``); a per-rank noise term uses
the global torch RNG, so the resumed run is bit-identical only if each rank's RNG is restored.

Rank 0 appends ``<step> <loss as float.hex()>`` to OUT_DIR/losses.txt; at the end every rank
writes the sha256 of its final parameters and Adam state to OUT_DIR/final-<rank>.txt.
``--reference`` trains without the checkpoint library (the uninterrupted run to compare with).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

D_IN, HIDDEN, BATCH = 16, 32, 8


class Batches(torch.utils.data.Dataset[torch.Tensor]):
    """Batch ``i`` is the same on every rank and every run (seeded by its index)."""

    def __init__(self, start: int, total: int) -> None:
        self.start, self.total = start, total

    def __len__(self) -> int:
        return self.total - self.start

    def __getitem__(self, index: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(10_000 + self.start + index)
        return torch.randn(BATCH, D_IN, generator=gen)


def fresh(rank: int, world: int) -> tuple[list[torch.Tensor], torch.optim.Adam]:
    gen = torch.Generator().manual_seed(7)  # the full model, then this rank's slices
    w1 = torch.randn(HIDDEN, D_IN, generator=gen) * 0.3
    w2 = torch.randn(1, HIDDEN, generator=gen) * 0.3
    rows = HIDDEN // world
    params = [w1[rank * rows:(rank + 1) * rows].clone().requires_grad_(),
              w2[:, rank * rows:(rank + 1) * rows].clone().requires_grad_()]
    torch.manual_seed(1000 + rank)  # per-rank noise stream
    return params, torch.optim.Adam(params, lr=0.01)


def train_step(params: list[torch.Tensor], optim: torch.optim.Adam, x: torch.Tensor) -> float:
    w1, w2 = params
    target = x.sum(dim=1, keepdim=True).sin()
    partial = torch.relu(x @ w1.T) @ w2.T
    total = partial.detach().clone()
    dist.all_reduce(total)
    out = partial + (total - partial.detach())  # gradient flows into this rank's slice only
    loss = ((out - target) ** 2).mean()
    optim.zero_grad()
    loss.backward()
    for p in params:
        assert p.grad is not None
        p.grad.add_(torch.randn_like(p) * 1e-3)  # per-rank RNG matters for bit identity
    optim.step()
    return float(loss.item())


def state_dict(params: list[torch.Tensor], optim: torch.optim.Adam, mesh: object
               ) -> dict[str, object]:
    """Model and Adam state as DTensors of the global shapes, sharded like the model."""
    placements = [Shard(0), Shard(1)]
    sd: dict[str, object] = {}
    for i, (p, place) in enumerate(zip(params, placements, strict=True)):
        sd[f"w{i}"] = DTensor.from_local(p.detach(), mesh, [place], run_check=False)
        st = optim.state.get(p, {})
        for key in ("exp_avg", "exp_avg_sq"):
            local = st[key] if key in st else torch.zeros_like(p)
            sd[f"w{i}.{key}"] = DTensor.from_local(local, mesh, [place], run_check=False)
        step = st.get("step", torch.tensor(0.0))
        sd[f"w{i}.step"] = step if isinstance(step, torch.Tensor) else torch.tensor(float(step))
    return sd


def restore(params: list[torch.Tensor], optim: torch.optim.Adam, sd: dict[str, object]) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    with torch.no_grad():
        for i, p in enumerate(params):
            loaded = sd[f"w{i}"]
            assert isinstance(loaded, DTensor)
            p.copy_(loaded.to_local().clone())  # DCP may have loaded into p already
            state[i] = {key: sd[f"w{i}.{key}"].to_local().clone()  # type: ignore[attr-defined]
                        for key in ("exp_avg", "exp_avg_sq")}
            step = sd[f"w{i}.step"]
            assert isinstance(step, torch.Tensor)
            state[i]["step"] = step.clone()
    optim.load_state_dict({"state": state, "param_groups": optim.state_dict()["param_groups"]})


def digest(params: list[torch.Tensor], optim: torch.optim.Adam) -> str:
    h = hashlib.sha256()
    for p in params:
        h.update(p.detach().numpy().tobytes())
        for key in ("exp_avg", "exp_avg_sq"):
            h.update(optim.state[p][key].numpy().tobytes())
    return h.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("total", type=int)
    parser.add_argument("--async-every", type=int, default=0)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK") or os.environ["SLURM_PROCID"])
    world = int(os.environ.get("WORLD_SIZE") or os.environ["SLURM_NTASKS"])
    run = os.environ.get("SLURM_RESTART_COUNT", "0")
    ck = None
    if not args.reference:
        from hai_slurm.checkpoint import DCP_FILES, Checkpointer, ignore_requests_in_worker
        ck = Checkpointer.from_env()
    store = os.environ.get("TRAIN_STORE") or str(
        args.out / f"store-{os.environ.get('SLURM_JOB_ID', 'local')}-{run}")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    ckpt_group = dist.new_group(backend="gloo")  # async saves talk on their own group
    params, optim = fresh(rank, world)
    start = 0
    if ck is not None:
        def load(part: object) -> None:
            sd = state_dict(params, optim, mesh)
            dcp.load(sd, checkpoint_id=part.checkpoint)  # type: ignore[attr-defined]
            restore(params, optim, sd)

        loaded = ck.load_with(load)  # restores this rank's RNG too
        start = loaded.step if loaded is not None else 0
    print(f"rank {rank} run {run} start {start}", flush=True)
    loader = torch.utils.data.DataLoader(  # own generator: the global RNG is the model's
        Batches(start, args.total), batch_size=None, num_workers=1,
        generator=torch.Generator().manual_seed(0),
        worker_init_fn=None if ck is None else ignore_requests_in_worker)
    losses = (args.out / "losses.txt").open("a") if rank == 0 else None
    for step, x in enumerate(loader, start=start + 1):
        loss = train_step(params, optim, x)
        if losses is not None:
            losses.write(f"{step} {loss.hex()}\n")
            losses.flush()
        time.sleep(args.step_seconds)
        if ck is None:
            continue
        if ck.requested(step):
            print(f"rank {rank} saving at step {step}", flush=True)
            ck.save_with(lambda part: dcp.save(state_dict(params, optim, mesh),
                                               checkpoint_id=part.checkpoint),
                         step=step, shared_files=DCP_FILES)
            ck.acknowledge_and_exit()  # barrier, destroy the process group, exit 75
        if args.async_every and step % args.async_every == 0:
            ck.save_with(lambda part: dcp.async_save(state_dict(params, optim, mesh),
                                                     checkpoint_id=part.checkpoint,
                                                     process_group=ckpt_group),
                         step=step, shared_files=DCP_FILES)
    if ck is not None:
        ck.close()
    (args.out / f"final-{rank}.txt").write_text(digest(params, optim))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
