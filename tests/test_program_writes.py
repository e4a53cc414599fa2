"""The program's own writes: recorded in the child, runs one at a time, and told to the user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.conftest import run_gbfix

RECORD = textwrap.dedent(
    """\
    import json, os, pathlib, shutil, sys, tempfile
    from gbfix.child.writes import WriteRecorder

    run_dir = tempfile.mkdtemp(dir=os.getcwd())
    recorder = WriteRecorder(run_dir, os.getcwd())
    recorder.install()
    with open("log.csv", "a") as f:           # append
        f.write("1\\n")
    pathlib.Path("ckpt.tmp").write_bytes(b"w")  # write, then rename over
    os.replace("ckpt.tmp", "ckpt.pt")
    fd = os.open("raw.bin", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    os.remove("raw.bin")
    os.mkdir("out")
    open("log.csv").read()                     # reads are not writes
    with tempfile.NamedTemporaryFile("w", dir=sys.argv[1]) as t:  # scratch space outside the folder
        t.write("x")
    open(os.path.join(run_dir, "result.json"), "w").close()  # gbfix's own run folder
    print(json.dumps(recorder.result()))
    """
)


def test_the_recorder_sees_writes_renames_and_removals_not_reads_or_scratch(tmp_path):
    work, scratch = tmp_path / "work", tmp_path / "scratch"  # pytest's folders lie in the temporary folder
    work.mkdir()
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.run([sys.executable, "-c", RECORD, str(scratch)], cwd=work, capture_output=True, text=True, check=True, env=env)
    got = json.loads(proc.stdout)
    names = [p.removeprefix(str(work.resolve()) + "/") for p in got["paths"]]
    assert names == ["log.csv", "ckpt.tmp", "ckpt.pt", "raw.bin", "out"]
    assert got["more"] is False


WRITER = textwrap.dedent(
    """\
    import os
    import time

    import torch


    @torch.compile(backend="eager")
    def step(x):
        print("step")
        return x + 1


    if __name__ == "__main__":
        with open("runs.log", "a") as log:
            log.write(f"start {os.getpid()}\\n")
            log.flush()
            step(torch.ones(2))
            time.sleep(0.3)
            log.write(f"end {os.getpid()}\\n")
        torch.save({"w": 1}, "ckpt.pt")
    """
)


def test_a_program_that_writes_runs_one_at_a_time_and_the_user_is_told(tmp_path):
    (tmp_path / "train.py").write_text(WRITER)
    proc = run_gbfix("--dry-run", "--no-cache", "--entry", "python train.py", "train.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = (tmp_path / "runs.log").read_text().splitlines()
    # each run's start is followed by its own end: no two runs overlapped
    assert len(lines) >= 4 and len(lines) % 2 == 0
    for start, end in zip(lines[::2], lines[1::2]):
        assert start.startswith("start ") and end == "end " + start.split()[1]
    note = next(ln for ln in proc.stderr.splitlines() if ln.startswith("note: ran "))
    assert note == (
        f"note: ran `python train.py` {len(lines) // 2} time(s) in {tmp_path.resolve()}, one run at a time since it "
        "writes files (runs.log, ckpt.pt), which each run wrote again"
    )


def test_a_program_that_writes_nothing_is_said_so(tmp_path):
    quiet = WRITER.split('if __name__ == "__main__":')[0] + 'if __name__ == "__main__":\n    step(torch.ones(2))\n'
    (tmp_path / "train.py").write_text(quiet)
    proc = run_gbfix("--dry-run", "--no-cache", "--entry", "python train.py", "train.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "; it wrote no file outside the temporary folder and caches" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]
