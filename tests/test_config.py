"""[tool.gbfix], the flags that override it, `gbfix config`, and --backend.

One real run (module-scoped): `gbfix --apply --backend inductor --output-format github`
from a subfolder of tests/fixtures/suppressed, so the entry and the targets come from the
pyproject.toml above, the final check runs on inductor although the program compiles with
backend="eager", and the breaks left (one suppressed, one not selected) do not fail it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gbfix import engine
from gbfix.config import Config, Setting, find_config, resolve
from gbfix.errors import GbfixError
from tests.conftest import FIXTURES, run_gbfix

pytestmark = pytest.mark.xdist_group("test_config")

FULL = """\
[tool.gbfix]
entry = "python train.py --steps 3"
targets = ["src", "train.py"]
select = ["gb01", "GB0059"]
ignore = ["GB0170"]
unsafe-fixes = true
fullgraph = true
zero-recompiles = true
backend = "inductor"
timeout = 60
"""


def project(root: Path, toml: str) -> Path:
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text("")
    (root / "pyproject.toml").write_text(toml)
    return root


def test_every_key(tmp_path):
    config = find_config(project(tmp_path, FULL))
    assert config == Config(
        root=tmp_path.resolve(), entry="python train.py --steps 3", timeout=60.0, unsafe_fixes=True, fullgraph=True,
        zero_recompiles=True, backend="inductor", targets=("src", "train.py"), select=("GB01", "GB0059"), ignore=("GB0170",),
    )
    assert find_config(project(tmp_path / "empty", "[tool.other]\nx = 1\n")) is None


@pytest.mark.parametrize("line, message", [
    ("bogus = 1", "unknown key(s) in [tool.gbfix]: bogus (known: entry, targets, select, ignore, unsafe-fixes, fullgraph, zero-recompiles, backend, timeout)"),
    ('timeout = "10"', "[tool.gbfix] timeout: expected a positive number of seconds, got '10'"),
    ("timeout = 0", "[tool.gbfix] timeout: expected a positive number of seconds, got 0"),
    ('backend = "tvm"', "[tool.gbfix] backend: expected \"own\", \"eager\" or \"inductor\", got 'tvm'"),
    ('select = ["GB1x"]', "[tool.gbfix] select: invalid code 'GB1x' (expected a GB code like GB0059, a prefix like GB01, or ALL)"),
    ('ignore = "GB0059"', "[tool.gbfix] ignore: expected a list of codes like [\"GB0059\", \"GB01\"], got 'GB0059'"),
    ('targets = "src"', "[tool.gbfix] targets: expected a non-empty list of paths like [\"src\"], got 'src'"),
    ("fullgraph = 1", "[tool.gbfix] fullgraph: expected true or false, got 1"),
    ('zero-recompiles = "on"', "[tool.gbfix] zero-recompiles: expected true or false, got 'on'"),
    ('unsafe-fixes = "yes"', "[tool.gbfix] unsafe-fixes: expected true or false, got 'yes'"),
    ('entry = ""', "[tool.gbfix] entry: expected a command string like \"python train.py\", got ''"),
])
def test_bad_config_is_a_one_line_error(tmp_path, line, message):
    project(tmp_path, f"[tool.gbfix]\n{line}\n")
    with pytest.raises(GbfixError) as e:
        find_config(tmp_path)
    assert str(e.value) == f"{tmp_path.resolve() / 'pyproject.toml'}: {message}"


def test_bad_config_and_bad_flags_exit_2(tmp_path):
    project(tmp_path, "[tool.gbfix]\nbackend = 3\n")
    for args in (("config",), ("lint", "src"), ("--entry", "python train.py", "src")):
        proc = run_gbfix(*args, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.splitlines() == [f"gbfix: error: {tmp_path.resolve() / 'pyproject.toml'}: [tool.gbfix] backend: expected \"own\", \"eager\" or \"inductor\", got 3"]
    (tmp_path / "pyproject.toml").write_text('[tool.gbfix]\nzero-recompiles = "on"\n')
    proc = run_gbfix("--entry", "python train.py", "src", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"gbfix: error: {tmp_path.resolve() / 'pyproject.toml'}: [tool.gbfix] zero-recompiles: expected true or false, got 'on'"
    ]
    (tmp_path / "pyproject.toml").write_text("")
    for args, needle in ((("--select", "GB5,X1"), "Invalid value for '--select': invalid code 'X1'"),
                         (("lint", "--ignore", "nope"), "Invalid value for '--ignore': invalid code 'nope'"),
                         (("--backend", "tvm"), "Invalid value for '--backend'"),
                         (("--timeout", "0"), "Invalid value for '--timeout'")):
        proc = run_gbfix(*args, cwd=tmp_path)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr


def test_flags_override_the_config_which_overrides_defaults(tmp_path):
    project(tmp_path, '[tool.gbfix]\nignore = ["GB0059"]\nunsafe-fixes = true\ntimeout = 30\nzero-recompiles = true\n')
    s = resolve((), {"select": ("GB0170",), "unsafe-fixes": False, "timeout": None, "backend": None, "zero-recompiles": False}, cwd=tmp_path)
    table = {k: (v.value, v.source, v.origin) for k, v in s.values.items()}
    assert table == {
        "entry": (None, "default", "default"),
        "targets": ((".",), "default", "default"),
        "select": (("GB0170",), "flag", "--select"),  # replaces, not extends
        "ignore": (("GB0059",), "pyproject", "pyproject.toml"),
        "unsafe-fixes": (False, "flag", "--no-unsafe-fixes"),
        "fullgraph": (False, "default", "default"),
        "zero-recompiles": (False, "flag", "--no-zero-recompiles"),
        "backend": ("own", "default", "default"),
        "timeout": (30.0, "pyproject", "pyproject.toml"),
    }
    assert resolve((), {}, cwd=tmp_path).values["zero-recompiles"] == Setting(True, "pyproject", "pyproject.toml")


def test_zero_recompiles_from_the_config_reaches_the_fix(tmp_path):
    """`zero-recompiles = true` alone (no flag) makes `gbfix` prove it: a run more, and the note."""
    (tmp_path / "pyproject.toml").write_text("[tool.gbfix]\nzero-recompiles = true\n")
    (tmp_path / "prog.py").write_text(
        'import torch\n\n\n@torch.compile(backend="eager")\ndef f(x):\n    return x + 1\n\n\n'
        'if __name__ == "__main__":\n    print(f(torch.ones(2)).tolist())\n'
    )
    proc = run_gbfix("-q", "prog.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "note: no recompile after warm-up: proven" in proc.stderr and "ran `prog.py` 2 time(s)" in proc.stderr


def test_targets_are_relative_to_the_pyproject(tmp_path, monkeypatch):
    project(tmp_path, '[tool.gbfix]\ntargets = ["src", "train.py"]\n')
    (tmp_path / "src" / "deep").mkdir()
    monkeypatch.chdir(tmp_path / "src" / "deep")
    s = resolve((), {}, cwd=Path.cwd())
    assert [p.resolve() for p in s.targets()] == [(tmp_path / "src").resolve(), (tmp_path / "train.py").resolve()]
    monkeypatch.chdir(tmp_path)
    assert resolve((), {}).targets() == [Path("src"), Path("train.py")]
    # PATHS given: they are the targets, and the config is the one nearest the first PATH
    assert resolve((Path("train.py"),), {}).targets() == [Path("train.py")]


def test_lint_uses_the_config_targets(tmp_path):
    project(tmp_path, '[tool.gbfix]\ntargets = ["src"]\n')
    (tmp_path / "src" / "m.py").write_text("import torch\n\n@torch.compile\ndef f(x):\n    print(x)\n    return x\n")
    (tmp_path / "elsewhere.py").write_text("import torch\n\n@torch.compile\ndef g(x):\n    print(x)\n    return x\n")
    proc = run_gbfix("lint", cwd=tmp_path / "src")  # a subfolder: targets are relative to the pyproject.toml
    assert proc.stdout.splitlines() == ["m.py:5:5: GB0059 likely: print() in compiled code"]
    proc = run_gbfix("lint", "--select", "GB0170", cwd=tmp_path)
    assert proc.returncode == 0 and "(1 file checked, 1 compiled region)" in proc.stderr


def test_config_command(tmp_path):
    project(tmp_path, FULL)
    proc = run_gbfix("config", "--ignore", "GB0059,GB0124", "--no-fullgraph", "--no-zero-recompiles", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "# [tool.gbfix] from pyproject.toml",
        'entry           = "python train.py --steps 3" # pyproject.toml',
        'targets         = ["src", "train.py"]      # pyproject.toml',
        'select          = ["GB01", "GB0059"]       # pyproject.toml',
        'ignore          = ["GB0059", "GB0124"]     # --ignore',
        "unsafe-fixes    = true                     # pyproject.toml",
        "fullgraph       = false                    # --no-fullgraph",
        "zero-recompiles = false                    # --no-zero-recompiles",
        'backend         = "inductor"               # pyproject.toml',
        "timeout         = 60.0                     # pyproject.toml",
    ]
    proc = run_gbfix("config", "--output-format", "json", "train.py", cwd=tmp_path)
    data = json.loads(proc.stdout)
    assert data["config"] == "pyproject.toml"
    assert data["settings"]["targets"] == {"value": ["train.py"], "source": "flag", "origin": "PATHS"}
    assert data["settings"]["timeout"] == {"value": 60.0, "source": "pyproject", "origin": "pyproject.toml"}
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    proc = run_gbfix("config", "--format", "json", cwd=bare)
    data = json.loads(proc.stdout)
    assert data["config"] is None
    assert {k: (v["value"], v["source"]) for k, v in data["settings"].items()} == {
        "entry": (None, "default"), "targets": (["."], "default"), "select": (["ALL"], "default"), "ignore": ([], "default"),
        "unsafe-fixes": (False, "default"), "fullgraph": (False, "default"), "zero-recompiles": (False, "default"),
        "backend": ("own", "default"), "timeout": (900.0, "default"),
    }
    assert run_gbfix("config", cwd=bare).stdout.splitlines()[1] == "entry           = (not set)                # default"


# --- --backend ---------------------------------------------------------------------------


def test_backend_reaches_the_child():
    assert [engine.Options(backend=b).final_backend for b in ("own", "eager", "inductor")] == ["own", "force:eager", "force:inductor"]
    from gbfix.child.compile_patch import CompileRecorder  # imports torch; nothing is compiled

    def fn(x):
        return x

    def kwargs_of(child_mode, child_fullgraph, *args, **kwargs):
        recorder = CompileRecorder(child_mode, child_fullgraph)
        seen = []
        recorder._real = lambda model, **kw: seen.append(kw) or model
        recorder._wrap = lambda compiled, name: compiled
        compiled = recorder.compile(*args, **kwargs)
        if not args:  # @torch.compile(...) with arguments
            compiled(fn)
        return seen[0]

    # a backend replaced: its mode / options go with it
    assert kwargs_of("force:inductor", None, fn, backend="eager", options={"x": 1}, dynamic=False) == {"backend": "inductor", "dynamic": False}
    assert kwargs_of("force:inductor", None, fn, mode="max-autotune") == {"mode": "max-autotune", "backend": "inductor"}
    assert kwargs_of("force:eager", True, mode="reduce-overhead") == {"backend": "eager", "fullgraph": True}
    assert kwargs_of("own", None, fn, backend="aot_eager") == {"backend": "aot_eager"}
    assert kwargs_of("eager", None, fn, mode="max-autotune", fullgraph=True) == {"backend": "eager", "fullgraph": False}


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    root = tmp_path_factory.mktemp("config") / "proj"
    shutil.copytree(FIXTURES / "suppressed", root)
    before = (root / "pkg" / "blocks.py").read_text()
    env = {**os.environ, "GITHUB_WORKSPACE": str(root)}
    proc = subprocess.run(
        [sys.executable, "-m", "gbfix", "--apply", "--backend", "inductor", "--output-format", "github"],
        cwd=root / "pkg", env=env, capture_output=True, text=True, timeout=600,
    )
    return proc, before, (root / "pkg" / "blocks.py").read_text()


def test_apply_with_config_from_a_subfolder(applied):
    proc, before, after = applied
    assert proc.returncode == 0, proc.stderr  # the breaks left are suppressed or not selected
    assert "wrote blocks.py" in proc.stderr
    assert [ln for ln in before.splitlines() if ln not in after.splitlines()] == ["        scale = self.temperature.item()"]
    assert "        print(\"gate input\", x.shape)  # gbfix: ignore[GB0059]" in after and "if h.abs().max() > 1.0:" in after
    assert proc.stderr.splitlines()[-1] == "Found 1 graph break site: 1 fixed. 0 sites still break after the edits. 1 suppressed."


def test_backend_inductor_runs_the_final_check(applied):
    proc, _, _ = applied
    # run.py compiles with backend="eager": without --backend inductor there is no own-backend run
    assert "own-backend run with every accepted edit (1)" in proc.stderr


def test_github_annotations_are_relative_to_the_workspace(applied):
    proc, _, _ = applied
    assert proc.stdout.splitlines() == [
        "::notice file=pkg/blocks.py,line=13,col=17,title=GB0124::Unsupported Tensor.item() call with capture_scalar_outputs=False: "
        "Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False. (fixed: gbfix wrote a verified edit)"
    ]
