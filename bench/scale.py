"""Scale: gbfix on a repo of many Python files of which the entry touches a few.

    python bench/scale.py                 # 500 files, the entry imports 10, 3 of them break
    python bench/scale.py --files 2000 --touched 20

It writes a synthetic package into a temporary folder (each module a small
nn.Module with helpers, ~60 lines), an entry that imports and compiles
``--touched`` of them, with a print in the forward of ``--breaking`` of those,
and runs gbfix's engine on the whole folder (nothing is written). It reports
the wall time, the time spent in child runs of the program (detection and
verification), the rest (reading the targets, locating, recipes, diffs: the
static parts), and how many files were parsed with LibCST: only files named
in break stacks should be.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

_MODULE = '''"""Synthetic module {i}: a block with a few helpers, as a model zoo has hundreds."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def scale_{i}(x: torch.Tensor, factor: float = {f}) -> torch.Tensor:
    return x * factor


def gate_{i}(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x) * x


class Block{i}(nn.Module):
    """Linear, norm and a gated residual."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.proj(x))
{extra}        h = gate_{i}(h)
        return x + scale_{i}(self.out(h))


def build_{i}(dim: int = 16) -> Block{i}:
    return Block{i}(dim)


def describe_{i}() -> str:
    lines = []
    for k in range(3):
        lines.append(f"block {i} part {{k}}")
    return "\\n".join(lines)
'''
_BREAK = '        print("block {i} forward")\n'


def make_repo(root: Path, files: int, touched: int, breaking: int) -> None:
    pkg = root / "zoo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for i in range(files):
        extra = _BREAK.format(i=i) if i < breaking else ""
        (pkg / f"block_{i:04d}.py").write_text(_MODULE.format(i=i, f=1 + i % 7 / 10, extra=extra))
    imports = "\n".join(f"from zoo.block_{i:04d} import build_{i}" for i in range(touched))
    builds = ", ".join(f"build_{i}()" for i in range(touched))
    (root / "run.py").write_text(
        f'''import torch
import torch.nn as nn
{imports}


def main() -> None:
    torch.manual_seed(0)
    model = torch.compile(nn.Sequential({builds}), backend="eager")
    for _ in range(2):
        print(f"{{model(torch.randn(2, 16)).sum().item():.4f}}")


if __name__ == "__main__":
    main()
'''
    )


def measure(files: int, touched: int, breaking: int) -> dict[str, float]:
    from gbfix import detect, engine, locate
    from gbfix.entry import parse

    parsed: list[Path] = []
    child = [0.0]
    real_init, real_start, real_result = locate.ParsedFile.__init__, detect.Prober.start, detect.Pending.result

    def counting_init(self, source):
        parsed.append(source.path)
        real_init(self, source)

    def timed(real):
        # Waiting on runs: their start (the first one boots the warm worker) and their
        # results, whether run one by one or started to go side by side.
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                child[0] += time.perf_counter() - started

        return wrapper

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_repo(root, files, touched, breaking)
        locate.ParsedFile.__init__, detect.Prober.start, detect.Pending.result = counting_init, timed(real_start), timed(real_result)
        try:
            started = time.perf_counter()
            result = engine.fix([root], parse("python run.py", root), engine.Options())
            total = time.perf_counter() - started
        finally:
            locate.ParsedFile.__init__, detect.Prober.start, detect.Pending.result = real_init, real_start, real_result
    return {
        "files": files,
        "touched": touched,
        "breaks": sum(not f.code.startswith("RC") for f in result.findings),
        "fixed": sum(f.status == "fixed" for f in result.findings),
        "total_s": total,
        "child_s": child[0],
        "static_s": total - child[0],
        "parsed": len(set(parsed)),
    }


def table(row: dict[str, float]) -> str:
    head = "| files | entry touches | breaks | fixed | gbfix total s | child runs s | static parts s | files parsed |"
    return "\n".join(
        [
            head,
            "|---|---|---|---|---|---|---|---|",
            f"| {row['files']} | {row['touched']} | {row['breaks']} | {row['fixed']} | {row['total_s']:.1f} "
            f"| {row['child_s']:.1f} | {row['static_s']:.2f} | {row['parsed']} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--touched", type=int, default=10)
    ap.add_argument("--breaking", type=int, default=3)
    args = ap.parse_args(argv)
    row = measure(args.files, args.touched, min(args.breaking, args.touched))
    print(table(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
