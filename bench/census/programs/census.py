"""Shared helper of the census programs: seeding, compile, the run loops, the digest.

A census program is one entry of a table module (hf.py, diffusers_programs.py,
kornia_programs.py, pyg_programs.py, lucid_programs.py): a small function that
builds one model from a tiny random config (no weights, no hub) and runs it
through one of the loops below. ``python TABLE.py NAME`` runs one program and
prints its digest on stdout; ``python TABLE.py --list`` lists the programs
this environment can run.

The backend is the program's own (``eager`` unless the table says otherwise);
the environment variable ``CENSUS_BACKEND`` overrides it (payoff.py sets
``inductor``). ``CENSUS_DUMP=FILE`` also saves every recorded output with
torch.save, so two runs can be compared with torch.testing.assert_close.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

BACKEND_ENV = "CENSUS_BACKEND"


@dataclass
class Program:
    build: Callable[[Ctx], Any]
    backend: str = "eager"
    note: str = ""
    envs: tuple[str, ...] = ()  # empty: every environment where its imports work


def seed(s: int = 0) -> None:
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


class Ctx:
    """What a program's build function gets: compile() and the run loops."""

    def __init__(self, backend: str):
        self.backend = os.environ.get(BACKEND_ENV, backend)
        self.records: list[tuple[str, Any]] = []

    # --- compile -----------------------------------------------------------------
    def compile(self, fn, **kw):
        return torch.compile(fn, backend=self.backend, **kw)

    # --- inputs ------------------------------------------------------------------
    @staticmethod
    def ids(b: int = 2, t: int = 12, vocab: int = 128, low: int = 3) -> torch.Tensor:
        return torch.randint(low, vocab, (b, t))

    @staticmethod
    def pad_mask(b: int = 2, t: int = 12, pad: int = 4) -> torch.Tensor:
        """All ones but the last row, whose last `pad` positions are padding."""
        m = torch.ones(b, t, dtype=torch.long)
        m[-1, t - pad:] = 0
        return m

    # --- loops -------------------------------------------------------------------
    def record(self, tag: str, value: Any) -> None:
        self.records.append((tag, value))

    def eval_calls(self, model, inputs: dict, calls: int = 2, compiled=None):
        """Compile the module, call it `calls` times under no_grad."""
        model.eval()
        cm = compiled if compiled is not None else self.compile(model)
        with torch.no_grad():
            for i in range(calls):
                self.record(f"call{i}", cm(**inputs))

    def train_steps(self, model, inputs: dict, steps: int = 2, loss_fn=None):
        """Compile the module; `steps` SGD steps with loss.backward() outside the compiled call."""
        model.train()
        cm = self.compile(model)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for i in range(steps):
            out = cm(**inputs)
            loss = loss_fn(out) if loss_fn is not None else _loss(out)
            loss.backward()
            opt.step()
            opt.zero_grad()
            self.record(f"loss{i}", loss.detach())
        self.record("params", sum(p.detach().double().abs().sum() for p in model.parameters()))

    def generate(self, model, inputs: dict, max_new_tokens: int = 4, **kw):
        """HF generation, greedy, with the model's forward compiled."""
        model.eval()
        model.forward = self.compile(model.forward)
        with torch.no_grad():
            for i in range(2):
                self.record(f"gen{i}", model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, **kw))

    def call_fn(self, fn, args: tuple = (), kwargs: dict | None = None, calls: int = 2, grad: bool = False):
        """Compile a plain function (or module) and call it `calls` times."""
        cf = self.compile(fn)
        ctx = torch.enable_grad() if grad else torch.no_grad()
        with ctx:
            for i in range(calls):
                self.record(f"call{i}", cf(*args, **(kwargs or {})))


def _loss(out) -> torch.Tensor:
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is not None:
        return loss
    first = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)
    if not isinstance(first, torch.Tensor):
        first = next(v for v in out.values() if isinstance(v, torch.Tensor))
    return first.float().pow(2).mean()


def _walk(prefix: str, obj: Any, out: list[tuple[str, Any]]) -> None:
    if isinstance(obj, torch.Tensor):
        out.append((prefix, obj))
    elif isinstance(obj, dict) or (hasattr(obj, "keys") and hasattr(obj, "__getitem__")):
        for k in list(obj.keys()):
            _walk(f"{prefix}.{k}", obj[k], out)
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            _walk(f"{prefix}[{i}]", v, out)
    elif isinstance(obj, (int, float, bool, str)) or obj is None:
        out.append((prefix, obj))
    elif hasattr(obj, "to_tuple"):
        _walk(prefix, obj.to_tuple(), out)
    elif hasattr(obj, "__dict__"):
        for k, v in vars(obj).items():
            if isinstance(v, (torch.Tensor, tuple, list, dict)):
                _walk(f"{prefix}.{k}", v, out)


def digest_lines(records) -> list[str]:
    flat: list[tuple[str, Any]] = []
    for tag, value in records:
        _walk(tag, value, flat)
    lines = []
    for path, v in flat:
        if isinstance(v, torch.Tensor):
            t = v.detach()
            if t.is_floating_point() or t.is_complex():
                d = t.double() if not t.is_complex() else t.abs().double()
                lines.append(f"{path} {tuple(t.shape)} {t.dtype} sum={d.sum().item():.5e} abs={d.abs().sum().item():.5e}")
            else:
                lines.append(f"{path} {tuple(t.shape)} {t.dtype} sum={int(t.long().sum())} crc={hash(tuple(t.flatten().tolist())) & 0xffffffff:08x}")
        else:
            lines.append(f"{path} {v!r}")
    return lines


def _available(programs: dict[str, Program], which: str = "census") -> list[str]:
    """The programs this environment runs. selection.json (from a TORCH_LOGS=graph_breaks survey of
    every program) names per environment the `quiet` ones (no break there, or they fail) and the
    `extra` ones (breaking, but the same sites as another program): `--list` leaves both out,
    `--list-extra` adds the extra ones, `--list-all` lists everything."""
    import json
    from pathlib import Path

    env = os.environ.get("CENSUS_ENV", "")
    names = [n for n, p in programs.items() if not p.envs or not env or env in p.envs]
    if which == "all":
        return names
    sel = json.loads((Path(__file__).with_name("selection.json")).read_text())
    skip = set(sel["quiet"].get(env, ()))
    if which == "census":
        skip |= set(sel["extra"].get(env, ()))
    return [n for n in names if n not in skip]


def main(programs: dict[str, Program]) -> None:
    args = sys.argv[1:]
    if not args or args[0].startswith("--list"):
        which = {"--list-all": "all", "--list-extra": "extra"}.get(args[0] if args else "", "census")
        print("\n".join(_available(programs, which)))
        return
    name = args[0]
    prog = programs[name]
    seed(0)
    torch.set_num_threads(1)
    ctx = Ctx(prog.backend)
    prog.build(ctx)
    for line in digest_lines(ctx.records):
        print(line)
    dump = os.environ.get("CENSUS_DUMP")
    if dump:
        flat: list[tuple[str, Any]] = []
        for tag, value in ctx.records:
            _walk(tag, value, flat)
        torch.save([(p, v.detach() if isinstance(v, torch.Tensor) else v) for p, v in flat], dump)
