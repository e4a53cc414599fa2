"""Create the census environments: one venv per requirements file, pinned.

    python bench/census/setup.py            # every environment in requirements/
    python bench/census/setup.py hf4        # one of them

Each venv (bench/census/.venvs/NAME, git-ignored) is made with
``--system-site-packages`` so the system torch 2.13.0 satisfies every package's
``torch`` requirement; each requirements file pins ``torch==2.13.0`` as well.
Before installing, ``pip install --dry-run --report`` is checked: if pip would
install torch (or any nvidia-* / triton wheel) the setup stops, so a newer
multi-GB torch build is never downloaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQS = HERE / "requirements"
VENVS = HERE / ".venvs"
FORBIDDEN = {"torch", "triton", "torchvision", "torchaudio"}  # and any nvidia-* wheel


def venv_python(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def setup(name: str) -> None:
    req = REQS / f"{name}.txt"
    py = venv_python(name)
    if not py.exists():
        print(f"[{name}] creating venv", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(VENVS / name)], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [str(py), "-m", "pip", "install", "--quiet", "--dry-run", "--report", str(report), "-r", str(req)],
            check=True,
        )
        todo = [i["metadata"]["name"] + "==" + i["metadata"]["version"] for i in json.loads(report.read_text())["install"]]
    bad = [t for t in todo if (n := t.lower().split("==")[0]) in FORBIDDEN or n.startswith("nvidia-")]
    if bad:
        sys.exit(f"[{name}] pip would install {bad}: refusing (the system torch must satisfy the pins)")
    if not todo:
        print(f"[{name}] up to date", flush=True)
        return
    print(f"[{name}] installing {len(todo)} packages: {' '.join(todo)}", flush=True)
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "-r", str(req)], check=True)
    out = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, check=True)
    print(f"[{name}] torch in the venv: {out.stdout.strip()}", flush=True)


def main() -> None:
    names = sys.argv[1:] or sorted(p.stem for p in REQS.glob("*.txt"))
    for name in names:
        setup(name)


if __name__ == "__main__":
    main()
