"""Inputs that are odd but valid, and entries that misbehave in ways other than crashing:
each gets the right result or a one-line error (exit 2), and no file is lost or half-written."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import run_gbfix
from tests.helpers import processes_in

PROGRAM = textwrap.dedent(
    """\
    import torch


    @torch.compile(backend="eager")
    def step(x):
        print("step: café")
        return x * 2


    if __name__ == "__main__":
        print(step(torch.ones(2)).sum())
    """
)


def apply(folder, name="train.py", *extra, env=None):
    return run_gbfix("--apply", "--entry", f"python {name}" if " " not in name else f"python '{name}'", *extra, name, cwd=folder, env=env)


def fixed(text: str) -> bool:
    return 'gbfix_print("step: café")' in text and '    print("step: café")' not in text


def test_a_file_with_a_bom_keeps_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(b"\xef\xbb\xbf" + PROGRAM.encode())
    proc = apply(tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = script.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and fixed(data[3:].decode())


@pytest.mark.parametrize("kind", ["tabs", "form feeds"])
def test_tabs_and_form_feeds(tmp_path, kind):
    text = PROGRAM.replace("    ", "\t") if kind == "tabs" else PROGRAM.replace("\n\n\n@torch", "\n\n\x0c\n@torch")
    script = tmp_path / "train.py"
    script.write_text(text)
    proc = apply(tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = script.read_text()
    assert fixed(out.replace("\t", "    ")) and (("\tprint(step" in out) if kind == "tabs" else ("\x0c" in out))
    compile(out, "train.py", "exec")


def test_a_target_larger_than_a_megabyte(tmp_path):
    table = "".join(f"    {'0123456789' * 1000!r}\n" for _ in range(110))  # a data table: 110 lines of 10 kB
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("\n\n@torch.compile", f"\nTABLE = (\n{table})\n\n@torch.compile"))
    assert script.stat().st_size > 1_000_000
    proc = apply(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert fixed(script.read_text()) and script.read_text().count("0123456789" * 1000) == 110


def test_paths_with_spaces_and_non_ascii(tmp_path):
    folder = tmp_path / "my models" / "módulo"
    folder.mkdir(parents=True)
    (folder / "tren ñ.py").write_text(PROGRAM)
    proc = apply(folder, "tren ñ.py")
    assert proc.returncode == 0, proc.stderr
    assert fixed((folder / "tren ñ.py").read_text())


def test_a_c_locale(tmp_path):
    (tmp_path / "train.py").write_text(PROGRAM)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    env.pop("PYTHONIOENCODING", None)
    proc = run_gbfix("--dry-run", "--entry", "python train.py", "train.py", cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "step: caf" in proc.stdout


def test_an_entry_that_reads_stdin_gets_end_of_file(tmp_path):
    (tmp_path / "train.py").write_text(PROGRAM.replace("    print(step(", "    input('steps? ')\n    print(step("))
    proc = subprocess.run(
        [sys.executable, "-m", "gbfix", "--apply", "--entry", "python train.py", "train.py"],
        cwd=tmp_path, capture_output=True, text=True, input="3\n", timeout=300,
    )
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("gbfix [")]
    assert proc.returncode == 2 and len(lines) == 1 and "EOFError" in lines[0], proc.stderr
    assert (tmp_path / "train.py").read_text() == PROGRAM.replace("    print(step(", "    input('steps? ')\n    print(step(")


def test_an_entry_that_leaves_a_process_running(tmp_path):
    marker = tmp_path / "orphan-started"
    sleeper = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(300)"
    program = PROGRAM.replace(
        'if __name__ == "__main__":\n',
        'if __name__ == "__main__":\n'
        "    import subprocess, sys, time\n"
        f"    subprocess.Popen([sys.executable, '-c', {sleeper!r}])\n"
        "    time.sleep(0.5)\n",
    )
    (tmp_path / "train.py").write_text(program)
    proc = apply(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert marker.exists() and fixed((tmp_path / "train.py").read_text())
    assert processes_in(tmp_path) == []  # nothing the runs started outlives them


def signal_mid_run(tmp_path, sig):
    """gbfix --apply on a program that hangs after its compiled call, sent ``sig`` once the
    baseline run is under way: (its return code, its stderr, the program's folder, the scratch folder)."""
    work, scratch = tmp_path / "work", tmp_path / "scratch"
    work.mkdir()
    scratch.mkdir()
    hang = PROGRAM.replace("    print(step(torch.ones(2)).sum())\n", "    print(step(torch.ones(2)).sum())\n    import time\n    time.sleep(300)\n")
    (work / "train.py").write_text(hang)
    env = {**os.environ, "TMPDIR": str(scratch)}
    gbfix = subprocess.Popen(
        [sys.executable, "-m", "gbfix", "--apply", "--entry", "python train.py", "train.py"],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A suite started in the background by a non-interactive shell (`.ci/run &`) inherits
        # SIGINT ignored, and Python then keeps it ignored: Ctrl-C as a terminal would send it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not any(p != gbfix.pid and "gbfix.child" in open(f"/proc/{p}/cmdline").read() for p in processes_in(work)):
        assert time.monotonic() < deadline and gbfix.poll() is None
        time.sleep(0.2)
    time.sleep(3)  # the baseline run is under way
    gbfix.send_signal(sig)
    sent = time.monotonic()
    _, err = gbfix.communicate(timeout=60)
    # Ctrl-C ends gbfix at once (it once waited 30 s for a second report of the run it had killed)
    assert time.monotonic() - sent < 10, err
    deadline = time.monotonic() + 15
    while processes_in(work) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_in(work) == []  # the runs and the warm worker are gone
    assert (work / "train.py").read_text() == hang
    return gbfix.returncode, err, work, scratch


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "gbfix: interrupted"), (signal.SIGTERM, 143, "gbfix: terminated")])
def test_a_signal_mid_run_stops_everything_and_leaves_no_scratch(tmp_path, sig, code, said):
    """Ctrl-C or SIGTERM while the entry runs: the runs and the warm worker are gone, the
    scratch folder is removed, the target is unchanged."""
    rc, err, _, scratch = signal_mid_run(tmp_path, sig)
    assert rc == code and err.splitlines()[-1] == said, err
    assert [p.name for p in scratch.iterdir() if p.name.startswith("gbfix-")] == []


def test_sigkill_mid_run_leaves_no_process_and_no_changed_file(tmp_path):
    """SIGKILL cannot be caught: the warm worker sees its parent gone and stops the runs;
    the target is unchanged (a file is only ever replaced whole, by a rename)."""
    rc, _, work, scratch = signal_mid_run(tmp_path, signal.SIGKILL)
    assert rc == -signal.SIGKILL
    left = [p.name for p in scratch.iterdir() if p.name.startswith("gbfix-")]
    assert len(left) == 2  # its folder and its worker's log, no clean-up of its own: the next gbfix removes them
    (work / "quick.py").write_text(PROGRAM)
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = run_gbfix("--dry-run", "--entry", "python quick.py", "quick.py", cwd=work, env=env)
    assert proc.returncode == 1, proc.stderr
    assert [p.name for p in scratch.iterdir() if p.name.startswith("gbfix-")] == []


def test_a_second_gbfix_on_the_same_program_waits_its_turn(tmp_path):
    """While one gbfix runs the program, a second one on the same folder stops at once:
    their runs of the program and their writes would race."""
    slow = PROGRAM.replace("    print(step(torch.ones(2)).sum())\n", "    print(step(torch.ones(2)).sum())\n    import time\n    time.sleep(5)\n")
    (tmp_path / "train.py").write_text(slow)
    first = subprocess.Popen(
        [sys.executable, "-m", "gbfix", "--apply", "--entry", "python train.py", "train.py"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    time.sleep(4)  # the first holds the lock by now (it takes it before its worker starts)
    second = run_gbfix("--apply", "--entry", "python train.py", "train.py", cwd=tmp_path)
    lines = [ln for ln in second.stderr.splitlines() if not ln.startswith("gbfix [")]
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert f"another gbfix run (pid {first.pid}) is running the program in {tmp_path.resolve()}" in lines[0]
    first.communicate(timeout=300)
    assert first.returncode == 0 and fixed((tmp_path / "train.py").read_text())
    again = run_gbfix("--dry-run", "--entry", "python train.py", "train.py", cwd=tmp_path)
    assert again.returncode == 0, again.stderr  # the lock went with the first process


def test_an_entry_that_eats_memory_is_stopped_with_a_clear_error(tmp_path):
    """The run's processes together pass gbfix's cap (here 1 GiB): the run is stopped, one line."""
    hog = PROGRAM.replace(
        '    print(step(torch.ones(2)).sum())\n',
        '    print(step(torch.ones(2)).sum())\n    kept = []\n    while True:\n        kept.append(torch.ones(64 * 2**20, dtype=torch.uint8))\n',
    )
    (tmp_path / "train.py").write_text(hog)
    env = {**os.environ, "GBFIX_MEMORY_LIMIT": "1"}
    proc = run_gbfix("--dry-run", "--entry", "python train.py", "train.py", cwd=tmp_path, env=env)
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("gbfix [")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "the run used more than 1.0 GiB of memory and was stopped" in lines[0] and "GBFIX_MEMORY_LIMIT=GiB" in lines[0]
    assert processes_in(tmp_path) == []


def as_user_without_overrides(*args: str, cwd) -> subprocess.CompletedProcess:
    """gbfix run so that file permissions bind: root keeps its uid (its Python lives under
    /root) but loses the capabilities that let it read and list anything."""
    drop = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: permissions cannot be made to bind")
        drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    return subprocess.run([*drop, sys.executable, "-m", "gbfix", *args], check=False, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("what", ["folder", "file"])
def test_a_target_folder_or_file_gbfix_cannot_read(tmp_path, what):
    (tmp_path / "train.py").write_text(PROGRAM)
    hidden = tmp_path / "sub"
    hidden.mkdir()
    (hidden / "helpers.py").write_text("X = 1\n")
    locked = hidden if what == "folder" else hidden / "helpers.py"
    locked.chmod(0)
    try:
        proc = as_user_without_overrides("--dry-run", "--entry", "python train.py", ".", cwd=tmp_path)
        lint = as_user_without_overrides("lint", ".", cwd=tmp_path)
    finally:
        locked.chmod(0o755 if what == "folder" else 0o644)
    said = "cannot list the folder (Permission denied)" if what == "folder" else "cannot read the file (Permission denied)"
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"gbfix: error: sub{'' if what == 'folder' else '/helpers.py'}: {said}"], proc.stderr
    # lint, like ruff, reports an unreadable file as E902 and lints the rest; a folder it cannot list stops it.
    if what == "folder":
        assert lint.returncode == 2 and said in lint.stderr, lint
    else:
        assert lint.returncode == 1 and "sub/helpers.py:1:1: E902 cannot read the file" in lint.stdout, lint


def test_a_target_changed_by_another_writer_during_the_run_is_not_written(tmp_path):
    model = PROGRAM.split("\n\nif __name__")[0] + "\n"
    (tmp_path / "model.py").write_text(model)
    (tmp_path / "train.py").write_text(textwrap.dedent(
        """\
        import pathlib
        import torch
        from model import step

        print(step(torch.ones(2)).sum())
        with open(pathlib.Path(__file__).with_name("model.py"), "a") as f:  # another writer, mid-run
            f.write("# touched\\n")
        """
    ))
    proc = run_gbfix("--apply", "--entry", "python train.py", "model.py", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith("model.py: changed on disk while gbfix ran; nothing written"), proc.stderr
    after = (tmp_path / "model.py").read_text()
    assert after.startswith(model) and set(after[len(model):].splitlines()) == {"# touched"}  # only the other writer's lines
