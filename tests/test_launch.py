"""Runs forked from the warm worker behave as runs in fresh interpreters (real torch runs)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from gbfix import engine
from gbfix.detect import Prober, RunFailed, shared_workers, warm_worker
from gbfix.entry import parse
from tests.helpers import processes_in

SCRIPT = textwrap.dedent(
    """
    import atexit
    import concurrent.futures
    import os
    import sys
    import threading
    import time
    import warnings

    import torch


    @torch.compile(backend="eager")
    def f(x):
        print("inside", x.shape[0])  # GB0059: a break with a printed line
        return x.sin() + 1


    if __name__ == "__main__":
        torch.manual_seed(0)
        print(f(torch.randn(3)).sum().item())
        warnings.warn("done")
        print("OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY"))
        # What the end of the interpreter does: stop executors' idle workers, wait
        # for other threads, run atexit handlers.
        concurrent.futures.ThreadPoolExecutor(2).submit(time.sleep, 0.01)
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished"))).start()
        atexit.register(print, "atexit handler ran")
        if os.path.exists("HANG"):
            time.sleep(600)
        if "exit" in sys.argv:
            sys.exit(3)
    """
)


@pytest.fixture(autouse=True)
def own_workers():
    """These tests look at a worker of one gbfix run (its process, its failures): not one
    kept for the whole test session (but for the module-scoped prober, set up before)."""
    with shared_workers(False):
        yield


def _warm_prober(entry, workdir, timeout: float) -> Prober:
    """A prober forking its runs from a warm worker, as gbfix's engine uses."""
    return Prober(entry, workdir, timeout=timeout, worker=warm_worker(entry, timeout))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("launch")
    (root / "ex.py").write_text(SCRIPT)
    return root


@pytest.fixture(scope="module")
def warm(root):
    prober = _warm_prober(parse("python ex.py", root), root / "warm", 60)
    yield prober
    prober.close()


@pytest.fixture(scope="module")
def forked_and_fresh(root, warm):
    fresh = Prober(parse("python ex.py", root), root / "fresh").run()
    return warm.run(), fresh


def test_a_forked_run_records_what_a_fresh_one_does(forked_and_fresh, warm):
    forked, fresh = forked_and_fresh
    assert not warm.notes  # it really forked
    assert [(b.root.code, b.leaf.line) for b in forked.breaks] == [(b.root.code, b.leaf.line) for b in fresh.breaks]
    assert forked.breaks and forked.breaks[0].root.code == "GB0059"
    assert forked.stdout == fresh.stdout and "inside 3" in forked.stdout
    assert forked.warnings == fresh.warnings and forked.warnings
    assert forked.capabilities == fresh.capabilities


def test_a_run_ends_as_the_interpreter_would(forked_and_fresh):
    # threads joined, then atexit handlers, also when the run skips the teardown of its modules
    for run in forked_and_fresh:
        assert run.stdout.endswith("thread finished\natexit handler ran\n")


def test_runs_wait_for_openmp_passively_unless_the_user_says_otherwise(forked_and_fresh, root, monkeypatch):
    # spinning OpenMP threads of one run take the cores of the run beside it
    assert all("OMP_WAIT_POLICY PASSIVE" in run.stdout for run in forked_and_fresh)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    own = Prober(parse("python ex.py", root), root / "omp").run(backend="none")
    assert "OMP_WAIT_POLICY ACTIVE" in own.stdout


def test_the_prober_keeps_only_the_runs_it_may_still_have_to_stop(forked_and_fresh, warm):
    # the fixture's run was collected: the next start leaves it behind
    pending = warm.start(backend="none")
    assert warm.started == [pending]
    pending.result()
    assert pending.collected


def test_dynamo_can_be_off_in_a_forked_run(forked_and_fresh, warm):
    off = warm.run(backend="none", baseline=forked_and_fresh[0].outputs_path)
    assert off.breaks == () and "inside 3" in off.stdout


def test_a_hanging_forked_run_is_killed_with_its_group_and_the_worker_goes_on(tmp_path):
    (tmp_path / "ex.py").write_text(SCRIPT)
    prober = _warm_prober(parse("python ex.py", tmp_path), tmp_path / "work", 8)
    try:
        prober.run(backend="none")  # starts the worker
        (tmp_path / "HANG").touch()
        started = time.monotonic()
        with pytest.raises(RunFailed, match="timed out after 8 s"):
            prober.run(backend="none")
        assert time.monotonic() - started < 30
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        holding = [p for p in pids if _holds_files_in(p, str(tmp_path / "work"))]
        assert holding == []  # the run is gone (its output files were there)
        assert prober.launcher.proc.poll() is None  # the worker is not
        (tmp_path / "HANG").unlink()
        assert "inside 3" in prober.run(backend="none").stdout
        assert not prober.notes
    finally:
        prober.close()


def _holds_files_in(pid: int, text: str) -> bool:
    """Whether the process has a file under ``text`` (the prober's work folder) open."""
    try:
        return any(text in os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def test_sys_exit_in_a_forked_run_is_a_one_line_failure(root):
    prober = _warm_prober(parse("python ex.py exit", root), root / "exit", 60)
    try:
        with pytest.raises(RunFailed, match=r"sys.exit\(3\)"):
            prober.run()
    finally:
        prober.close()


def test_a_worker_that_must_not_fork_falls_back_to_fresh_interpreters_and_says_so(root, tmp_path, monkeypatch):
    # A sitecustomize that starts a thread: forking a threaded process is unsound.
    (tmp_path / "sitecustomize.py").write_text("import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    prober = _warm_prober(parse("python ex.py", root), root / "threaded", 120)
    try:
        result = prober.run(backend="none")
        assert "inside 3" in result.stdout
        assert prober.notes and "other thread" in prober.notes[0] and "fresh interpreter" in prober.notes[0]
    finally:
        prober.close()


INDUCTOR_SCRIPT = textwrap.dedent(
    """
    import torch
    from torch._inductor import config
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    config.cpp.vec_isa_ok = False  # the program's setting, made before it compiles


    @torch.compile
    def f(x):
        return (x * 2).sum()


    print(f(torch.arange(64.0)).item(), "vectorised:", bool(pick_vec_isa()))
    """
)


def test_a_forked_inductor_run_after_the_workers_warm_up_keeps_the_programs_inductor_config(tmp_path):
    # The worker probes inductor's CPU vector ISAs once for all runs; a run that
    # turns vectorisation off must still get none, as it does in a fresh interpreter.
    (tmp_path / "ind.py").write_text(INDUCTOR_SCRIPT)
    entry = parse("python ind.py", tmp_path)
    fresh = Prober(entry, tmp_path / "fresh").run(backend="own")
    prober = _warm_prober(entry, tmp_path / "warm", 300)
    try:
        prober.run(backend="none")  # the first fork; the warm-up goes on beside it
        forked = prober.run(backend="own")
        assert not prober.notes  # forked after the warm-up thread ended
    finally:
        prober.close()
    assert forked.stdout == fresh.stdout == "4032.0 vectorised: False\n"


def test_a_worker_booted_early_is_the_one_the_prober_forks_from_and_leaves_nothing(tmp_path):
    (tmp_path / "ex.py").write_text(SCRIPT)
    worker = warm_worker(parse("python ex.py", tmp_path), timeout=60)
    assert worker is not None and worker.proc is not None  # booting before any run
    server, log = worker.proc.pid, worker.log
    prober = Prober(parse("python ex.py", tmp_path), tmp_path / "work", timeout=60, worker=worker)
    try:
        assert "inside 3" in prober.run(backend="none").stdout
        assert prober.launcher.proc.pid == server and not prober.notes
    finally:
        prober.close()
    assert worker.proc is None and not log.exists()
    assert processes_in(tmp_path) == []


def test_a_worker_that_cannot_start_leaves_runs_to_fresh_interpreters_and_says_so(tmp_path, monkeypatch):
    (tmp_path / "ex.py").write_text(SCRIPT)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))  # nowhere for the worker's log
    worker = warm_worker(parse("python ex.py", tmp_path), timeout=60)
    assert worker is not None and worker.proc is None and "did not start" in worker.failed
    prober = Prober(parse("python ex.py", tmp_path), tmp_path / "work", timeout=60, worker=worker)
    try:
        assert "inside 3" in prober.run(backend="none").stdout
        assert prober.notes and "fresh interpreter" in prober.notes[0] and "did not start" in prober.notes[0]
    finally:
        prober.close()


SHARED_SCRIPT = textwrap.dedent(
    """
    import torch

    import helper

    {setting}


    @torch.compile(backend="eager")
    def f(x):
        return x * x.sum().item() * helper.SCALE  # GB0124 unless scalar outputs are captured


    print(f(torch.ones(3)).tolist(), helper.SCALE)
    """
)


def test_gbfix_runs_sharing_a_kept_worker_see_nothing_of_each_other(tmp_path):
    # The first program changes Dynamo's config, imports its own `helper` and compiles `f`;
    # the second, forked from the same worker, must see none of it: its `.item()` breaks
    # (the default config), its own helper is imported and its `f` compiles anew.
    programs = []
    for name, setting, scale in (("a", "torch._dynamo.config.capture_scalar_outputs = True", 2), ("b", "", 3)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ex.py").write_text(SHARED_SCRIPT.format(setting=setting))
        (tmp_path / name / "helper.py").write_text(f"SCALE = {scale}\n")
        programs.append((tmp_path / name / "ex.py", parse("python ex.py", tmp_path / name)))
    with shared_workers():
        leases = [warm_worker(entry, 60) for _, entry in programs]
        first, second = (engine.fix([script], entry, worker=lease) for (script, entry), lease in zip(programs, leases))
        assert leases[0].worker is leases[1].worker and leases[1].worker.proc.poll() is None  # one worker, still up
        assert not any("fresh interpreter" in note for note in (*first.notes, *second.notes))  # both forked from it
    assert first.baseline.stdout == "[6.0, 6.0, 6.0] 2\n" and first.findings == ()
    assert second.baseline.stdout == "[9.0, 9.0, 9.0] 3\n"
    assert "GB0124" in {f.code for f in second.findings}
    assert leases[0].worker.proc is None  # stopped with the shared workers


def test_a_kept_worker_serves_runs_of_its_environment_each_with_its_own_test_name(tmp_path, monkeypatch):
    # pytest names the running test in the environment: not a reason for another worker,
    # but each run sees its own gbfix run's value; any other difference is another worker.
    (tmp_path / "ex.py").write_text("import os\nprint(os.environ['PYTEST_CURRENT_TEST'], os.environ.get('MARK'))\n")
    entry = parse("python ex.py", tmp_path)
    seen = []
    with shared_workers():
        for name, mark in (("first", None), ("second", None), ("third", "x")):
            monkeypatch.setenv("PYTEST_CURRENT_TEST", name)
            if mark:
                monkeypatch.setenv("MARK", mark)
            prober = Prober(entry, tmp_path / name, 60, worker=warm_worker(entry, 60))
            try:
                seen.append((prober.run(backend="none").stdout, prober.launcher.worker, prober.notes))
            finally:
                prober.close()
        workers = [worker for _, worker, _ in seen]
        assert workers[0] is workers[1] and workers[2] is not workers[0]
        assert workers[0].proc is None and workers[2].proc.poll() is None  # the idle one of another environment stopped
    assert [out for out, _, _ in seen] == ["first None\n", "second None\n", "third x\n"]
    assert not any(notes for _, _, notes in seen)  # all forked


PARENT_DIES = textwrap.dedent(
    """
    import os
    import sys
    from pathlib import Path

    from gbfix import launch
    from gbfix.detect import Prober, warm_worker
    from gbfix.entry import parse

    # Killed right after asking for the run, while the worker still imports torch.
    launch.Warm.receive = lambda self, deadline: os._exit(0)
    entry = parse("python ex.py", Path.cwd())
    Prober(entry, Path(sys.argv[1]), 60, worker=warm_worker(entry, 60)).start(backend="none")
    """
)


def test_a_worker_whose_gbfix_is_gone_before_it_answers_stops_the_run_it_forked(tmp_path):
    # Its answer has nowhere to go (a closed pipe): it must stop the run and end, not die
    # of the broken pipe and leave the run (here, one that hangs) behind.
    (tmp_path / "ex.py").write_text("import time\n\ntime.sleep(300)\n")
    (tmp_path / "parent.py").write_text(PARENT_DIES)
    work = tmp_path / "work"
    subprocess.run([sys.executable, "parent.py", str(work)], cwd=tmp_path, check=True, timeout=60)
    assert processes_in(tmp_path)  # the worker, importing torch
    deadline = time.monotonic() + 120
    while processes_in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)  # it forks the run, finds its gbfix gone, and ends both
    assert processes_in(tmp_path) == []
