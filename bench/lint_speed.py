"""`gbfix lint`'s speed on a project of a thousand files, as pre-commit runs it.

    python bench/lint_speed.py                                   # both projects, 3 rounds
    python bench/lint_speed.py --project generated --rounds 5
    python bench/lint_speed.py --python bench/census/.venvs/hf5/bin/python   # where transformers is

Two projects, each a git repository of 1,000 .py files plus a `run.py` that compiles a model
(`gbfix lint` searches the whole project for compile calls, whichever files it is given):
- `generated`: model code as a user's repository holds it, 20 packages of 50 modules
  (about 90 lines each: two nn.Modules, helpers, imports of a sibling and of shared
  utilities; every tenth has a print in its forward); run.py compiles the last block of
  the first package, whose forward reaches the 50 modules of that package through
  their submodules;
- `transformers`: the first 1,000 files of an installed transformers (the package's own
  modules, then model folders, llama first), with a run.py that compiles LlamaForCausalLM.
  Many of its big files (trainer, generation, modeling_utils) hold compile calls too.

Each case is `python -m gbfix lint ...` in a fresh process (Python's start-up included),
with gbfix's cache folder emptied for a "cold" run; the files themselves are in the OS's
page cache (just written). Cases: one model file cold, warm (unchanged), and after an
edit to it (the pre-commit case: the compile calls whose code read it are followed again),
then the whole tree cold and warm. Prints the median wall and CPU time of each (on a
shared machine the wall time stretches with the load; the CPU time is close to what an
idle machine's wall time would be) and files/second (the project's files over the CPU time).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from robustness import package_dir

REPO = Path(__file__).resolve().parent.parent
FILES = 1000


def generated(root: Path) -> Path:
    """1,000 files of model code; returns the model file to lint alone."""
    left, p = FILES - 4, 0  # less run.py, models/__init__.py and models/common/{__init__,utils}.py
    while left > 0:
        pkg = root / "models" / f"p{p:02d}"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        count = min(50, left - 1)
        left -= count + 1
        p += 1
        for i in range(count):
            debug = f'print("attention {i}", t)' if i % 10 == 5 else "pass"
            inner = f"from .mod{i - 1:02d} import Block{i - 1:02d}" if i else "Block = None"
            use = f"self.inner = Block{i - 1:02d}(dim)" if i else "self.inner = nn.Identity()"
            (pkg / f"mod{i:02d}.py").write_text(textwrap.dedent(f'''\
                """Block {i} of package {p}: attention and an MLP (gbfix lint benchmark)."""

                import math
                import re

                import torch
                from torch import nn
                from torch.nn import functional as F

                from models.common.utils import scale, norm_of
                {inner}

                _NAME = re.compile(r"block_(\\d+)")


                class Attention{i:02d}(nn.Module):
                    def __init__(self, dim: int, heads: int = 4):
                        super().__init__()
                        self.heads = heads
                        self.qkv = nn.Linear(dim, dim * 3)
                        self.out = nn.Linear(dim, dim)

                    def forward(self, x: torch.Tensor) -> torch.Tensor:
                        b, t, d = x.shape
                        {debug}
                        q, k, v = self.qkv(x).chunk(3, dim=-1)
                        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
                        att = F.softmax(att, dim=-1)
                        y = (att @ v).transpose(1, 2).reshape(b, t, d)
                        return self.out(y)


                class Block{i:02d}(nn.Module):
                    """One transformer block; the model is meant for torch.compile."""

                    def __init__(self, dim: int = 64):
                        super().__init__()
                        self.norm1 = nn.LayerNorm(dim)
                        self.attn = Attention{i:02d}(dim)
                        self.norm2 = nn.LayerNorm(dim)
                        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
                        {use}

                    def forward(self, x: torch.Tensor) -> torch.Tensor:
                        x = self.inner(x)
                        x = x + self.attn(self.norm1(x))
                        x = x + self.mlp(self.norm2(x))
                        return scale(x, {i + 1})

                    def describe(self) -> str:
                        print("block {i}", norm_of(self.mlp[0].weight))
                        return _NAME.sub("b", "block_{i}")


                def helper{i:02d}(x: torch.Tensor) -> float:
                    if x.sum() > 0:
                        return float(x.mean())
                    return x.abs().max().item()


                def init_weights{i:02d}(module: nn.Module) -> None:
                    for m in module.modules():
                        if isinstance(m, nn.Linear):
                            nn.init.normal_(m.weight, std=0.02)
                            if m.bias is not None:
                                nn.init.zeros_(m.bias)
            '''))
    common = root / "models" / "common"
    common.mkdir()
    (root / "models" / "__init__.py").write_text("")
    (common / "__init__.py").write_text("")
    (common / "utils.py").write_text(textwrap.dedent('''\
        import torch


        def scale(x: torch.Tensor, depth: int) -> torch.Tensor:
            return x / (depth ** 0.5)


        def norm_of(t: torch.Tensor) -> float:
            return t.norm().item()
    '''))
    (root / "run.py").write_text(textwrap.dedent('''\
        import torch

        from models.p00.mod49 import Block49

        model = torch.compile(Block49(64))
        print(model(torch.randn(2, 8, 64)).shape)
    '''))
    return root / "models" / "p00" / "mod25.py"


def transformers(root: Path, python: str) -> Path:
    """The first 1,000 files of transformers; returns modeling_llama.py."""
    src = package_dir("transformers", python)
    if src is None:
        raise SystemExit(f"transformers is not importable by {python} (give --python)")
    files = [p for p in sorted(src.rglob("*.py")) if p.relative_to(src).parts[0] != "models"]
    files.append(src / "models" / "__init__.py")
    for folder in sorted((d for d in (src / "models").iterdir() if d.is_dir()), key=lambda d: (d.name != "llama", d.name)):
        more = sorted(folder.rglob("*.py"))
        if len(files) + len(more) > FILES - 1:
            break
        files.extend(more)
    for p in files:
        dst = root / "transformers" / p.relative_to(src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dst)
    (root / "run.py").write_text(textwrap.dedent('''\
        import torch

        from transformers.models.llama.configuration_llama import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaForCausalLM

        model = torch.compile(LlamaForCausalLM(LlamaConfig()))
    '''))
    return root / "transformers" / "models" / "llama" / "modeling_llama.py"


def commit(root: Path) -> int:
    """Make ``root`` a git repository (pre-commit's setting); files are dated a minute back,
    as files are when a commit is made (lint does not cache a file changed a moment ago)."""
    past = time.time() - 60
    for p in root.rglob("*.py"):
        os.utime(p, (past, past))
    git = ["git", "-C", str(root), "-c", "user.email=bench@gbfix", "-c", "user.name=bench"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "project"], check=True)
    out = subprocess.run([*git, "ls-files", "*.py"], check=True, capture_output=True, text=True).stdout
    return len(out.splitlines())


def timed(root: Path, cache: Path, *args: str) -> tuple[float, float, str]:
    """Wall time, CPU time (user + system: what an idle machine's wall time would be, near
    enough; a shared machine stretches the wall time) and the summary line."""
    env = {**os.environ, "GBFIX_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO / "src")}
    env.pop("GBFIX_NO_CACHE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gbfix", "lint", *args], cwd=root, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"gbfix lint {' '.join(args)} failed:\n{proc.stderr}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return took, cpu, proc.stderr.strip().splitlines()[-1]


def edit(path: Path, n: int) -> None:
    """A change to the file, dated in the past like a saved edit (the cache keys on mtime and size)."""
    with path.open("a") as f:
        f.write(f"# edit {n}\n")
    past = time.time() - 30 + n
    os.utime(path, (past, past))


def measure(name: str, root: Path, model: Path, rounds: int) -> list[tuple[str, str, float, float, str]]:
    rel = str(model.relative_to(root))
    cache = root.parent / f"{name}-cache"
    cases = ("one file, cold", "one file, warm", "one file, edited", "whole tree, cold", "whole tree, warm")
    runs: dict[str, list[tuple[float, float, str]]] = {k: [] for k in cases}
    for r in range(rounds):
        shutil.rmtree(cache, ignore_errors=True)
        runs["one file, cold"].append(timed(root, cache, rel))
        runs["one file, warm"].append(timed(root, cache, rel))
        edit(model, r)
        runs["one file, edited"].append(timed(root, cache, rel))
        shutil.rmtree(cache, ignore_errors=True)
        runs["whole tree, cold"].append(timed(root, cache, "."))
        runs["whole tree, warm"].append(timed(root, cache, "."))
    return [
        (name, case, statistics.median(w for w, _, _ in rs), statistics.median(c for _, c, _ in rs), rs[-1][2])
        for case, rs in runs.items()
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", choices=("generated", "transformers", "both"), default="both")
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose transformers to copy")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="build the projects here and keep them (default: a temporary folder)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="gbfix-lint-speed-"))
    rows = []
    try:
        for name in ("generated", "transformers"):
            if args.project not in (name, "both"):
                continue
            root = work / name
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            model = generated(root) if name == "generated" else transformers(root, args.python)
            files = commit(root)
            print(f"{name}: {files} files, {sum(p.stat().st_size for p in root.rglob('*.py')) / 1e6:.1f} MB", file=sys.stderr)
            rows += [(files, *row) for row in measure(name, root, model, args.rounds)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gbfix", "lint", "--help"], capture_output=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
        startup = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        startup_cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"Medians of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f} at the end.\n")
    print("| project | files | case | wall s | CPU s | files/s (CPU) | summary |")
    print("|---|---|---|---|---|---|---|")
    for files, name, case, took, cpu, said in rows:
        print(f"| {name} | {files} | {case} | {took:.2f} | {cpu:.2f} | {files / cpu:.0f} | {said} |")
    print(f"\nPython start-up and gbfix's imports (`gbfix lint --help`): {startup:.2f} s wall, {startup_cpu:.2f} s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
