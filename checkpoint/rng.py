"""Capture and restore random number generator states, so a resumed run is bit-identical.

Covered: Python's global ``random``; numpy's global ``np.random`` and torch's CPU and CUDA
generators, *only if the training script already imported numpy/torch* (this module never imports
them: the job side must work in images without them). Import numpy/torch before
``Checkpointer.load_latest()`` so their states can be restored. ``numpy.random.Generator`` and
other generator objects that live inside your state are saved with the state itself.

States are converted to plain JSON-safe values (lists of ints, hex strings), so they can be stored
in either checkpoint format.
"""

from __future__ import annotations

import random
import sys
from typing import Any

RngStates = dict[str, Any]


def _python_state() -> list[Any]:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _numpy_state(np: Any) -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {"name": str(name), "keys": [int(k) for k in keys], "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def _torch_state(torch: Any) -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": bytes(torch.get_rng_state().numpy().tobytes()).hex()}
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available() and cuda.is_initialized():
        state["cuda"] = [bytes(s.numpy().tobytes()).hex() for s in cuda.get_rng_state_all()]
    return state


def capture() -> RngStates:
    """The current states of every generator we know of that is loaded in this process."""
    states: RngStates = {"python": _python_state()}
    np = sys.modules.get("numpy")
    if np is not None and hasattr(np, "random"):
        states["numpy"] = _numpy_state(np)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_rng_state"):
        states["torch"] = _torch_state(torch)
    return states


def restore(states: RngStates) -> list[str]:
    """Restore saved states; return notes about states that could not be restored."""
    notes: list[str] = []
    python = states.get("python")
    if python is not None:
        version, internal, gauss = python
        random.setstate((version, tuple(internal), gauss))
    saved_np = states.get("numpy")
    if saved_np is not None:
        np = sys.modules.get("numpy")
        if np is None:
            notes.append("numpy's RNG state was saved but numpy is not imported yet: import numpy "
                         "before load_latest() for a bit-identical resume")
        else:
            keys = np.asarray(saved_np["keys"], dtype=np.uint32)
            np.random.set_state((saved_np["name"], keys, saved_np["pos"],
                                 saved_np["has_gauss"], saved_np["cached_gaussian"]))
    saved_torch = states.get("torch")
    if saved_torch is not None:
        torch = sys.modules.get("torch")
        if torch is None:
            notes.append("torch's RNG state was saved but torch is not imported yet: import torch "
                         "before load_latest() for a bit-identical resume")
        else:
            def tensor(hex_text: str) -> Any:
                return torch.frombuffer(bytearray(bytes.fromhex(hex_text)), dtype=torch.uint8)

            torch.set_rng_state(tensor(saved_torch["cpu"]))
            cuda_states = saved_torch.get("cuda")
            if cuda_states:
                if torch.cuda.is_available() and torch.cuda.device_count() == len(cuda_states):
                    torch.cuda.set_rng_state_all([tensor(s) for s in cuda_states])
                else:
                    notes.append(f"{len(cuda_states)} CUDA RNG states were saved but this run "
                                 "sees a different number of GPUs: CUDA RNG not restored")
    return notes
