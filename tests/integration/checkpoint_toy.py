"""The toy training job of the checkpoint tests (shared with tests/matrix).

``TRAIN`` is a Python script: ``train.py OUT TOTAL`` trains TOTAL steps of a seeded random walk
with :class:`hai_slurm.checkpoint.Checkpointer` (periodic save every 40 steps, save-and-exit on a
checkpoint request) and writes a digest of the whole trajectory to OUT. With ``REFERENCE=1`` in
the environment it runs uninterrupted without the library: the result every resumed run must equal.
"""

TOTAL = 150

TRAIN = """
import hashlib, json, os, random, sys, time
out, total = sys.argv[1], int(sys.argv[2])

def fresh():
    random.seed(2026)
    return {"step": 0, "w": 0.0, "trace": []}

def one_step(state):
    x = random.random()
    state["w"] = state["w"] * 0.97 + x * random.gauss(0.0, 1.0)
    state["trace"].append(state["w"])

def finish(state):
    digest = hashlib.sha256(json.dumps(state["trace"]).encode()).hexdigest()
    with open(out, "w") as f:
        json.dump({"w": state["w"], "trace": digest, "next": random.random()}, f)

if os.environ.get("REFERENCE"):
    state = fresh()
    for s in range(total):
        one_step(state)
        state["step"] = s + 1
    finish(state)
    sys.exit(0)

from hai_slurm.checkpoint import Checkpointer
ck = Checkpointer.from_env(save_every_steps=40)
state = ck.load_latest() or fresh()
print("start", state["step"], flush=True)
for s in range(state["step"], total):
    one_step(state)
    state["step"] = s + 1
    time.sleep(0.04)
    if ck.requested():
        ck.save(state)
        ck.acknowledge_and_exit()
    if ck.due(state["step"]):
        ck.save(state)
finish(state)
"""
