"""Detect: run the entry once in a spawned child process and read back what it recorded."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gbfix.entry import Entry
from gbfix.errors import EntryError, GbfixError
from gbfix.gbcodes import torch_dir
from gbfix.records import Break, LogRecord, ObservedCall, RunResult, WarningRecord

DEFAULT_TIMEOUT = 900.0


class RunFailed(Exception):
    """One run of the entry did not complete; ``str()`` is a one-line reason."""


def _tail(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else ""


class Prober:
    """Runs the entry in child processes; each run gets its own scratch folder."""

    def __init__(self, entry: Entry, workdir: Path, timeout: float = DEFAULT_TIMEOUT) -> None:
        if torch_dir() is None:
            raise GbfixError(f"torch is not installed for {sys.executable}; install it first (pip install torch)")
        self.entry = entry
        self.workdir = workdir
        self.timeout = timeout
        self.runs = 0

    def run(
        self,
        *,
        overlay: dict[Path, bytes] | None = None,
        baseline: Path | None = None,
        backend: str = "eager",
        fullgraph: bool | None = None,
        observe: tuple[tuple[Path, int], ...] = (),
    ) -> RunResult:
        """One run; raises RunFailed if the entry crashed, exited non-zero or timed out.

        backend: "eager" (detection), "own" (the program's own settings) or
        "none" (Dynamo disabled). ``observe``: (file, first line) of user
        functions whose calls are recorded (see ``gbfix.child.observe``).
        """
        self.runs += 1
        rundir = self.workdir / f"run{self.runs}"
        rundir.mkdir(parents=True)
        files = {}
        for original, text in (overlay or {}).items():
            copy = rundir / f"{hashlib.sha1(str(original).encode()).hexdigest()[:12]}.py"
            copy.write_bytes(text)
            files[str(original)] = str(copy)
        spec = {
            "entry": self.entry.to_json(),
            "cwd": str(self.entry.cwd),
            "backend": backend,
            "fullgraph": fullgraph,
            "overlay": files,
            "outputs_out": str(rundir / "outputs.pt"),
            "baseline_outputs": str(baseline) if baseline else None,
            "result": str(rundir / "result.json"),
            "seed": 0,
            "observe": [{"file": str(path), "line": line} for path, line in observe],
        }
        spec_path = rundir / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        stdout_path, stderr_path = rundir / "stdout", rundir / "stderr"
        env = {
            **os.environ,
            "PYTHONDONTWRITEBYTECODE": "1",  # never litter the user's tree with __pycache__
            "PYTHONHASHSEED": "0",  # same set/dict iteration order in every run
            "PYTHONUNBUFFERED": "1",
        }
        if backend == "none":  # the program with compilation off: eager ground truth
            env["TORCHDYNAMO_DISABLE"] = "1"
        started = time.perf_counter()
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gbfix.child", str(spec_path)],
                cwd=self.entry.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,  # so a timeout can kill the whole process group
            )
            try:
                proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise RunFailed(f"timed out after {self.timeout:g} s") from None
        result_path = Path(spec["result"])
        if not result_path.is_file():
            last = _tail(stderr_path)
            raise RunFailed(f"exit code {proc.returncode}" + (f": {last}" if last else ""))
        data = json.loads(result_path.read_text(encoding="utf-8"))
        if data["error"]:
            raise RunFailed(data["error"])
        return RunResult(
            breaks=tuple(Break.from_json(b) for b in data["breaks"]),
            stdout=stdout_path.read_text(encoding="utf-8", errors="replace"),
            logs=tuple(LogRecord(**r) for r in data["logs"]),
            warnings=tuple(WarningRecord(**w) for w in data["warnings"]),
            compiled_calls=data["compiled_calls"],
            outputs_path=Path(spec["outputs_out"]),
            output_mismatch=data["output_mismatch"],
            compile_sites=tuple(tuple(s) for s in data["compile_sites"]),
            torch_version=data["torch_version"],
            capabilities=frozenset(data["capabilities"]),
            seconds=time.perf_counter() - started,
            observed={
                (o["file"], o["line"]): tuple(ObservedCall.from_json(c) for c in o["calls"]) for o in data["observed"]
            },
            graphs=data.get("graphs"),
        )

    def baseline(self) -> RunResult:
        """The first run of the unmodified program: any failure here is the user's to fix."""
        try:
            return self.run()
        except RunFailed as e:
            raise EntryError(f"the entry `{self.entry.text}` failed: {e}") from None
