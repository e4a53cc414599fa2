"""gbfix lint on part of a project (pre-commit passes only the commit's files): the compile
calls are found in the whole project (the targets of [tool.gbfix], else the git work tree,
else the folder), findings are reported only in the files given, and a project without
any compile call has its nn.Module forwards taken as compiled, saying so.

Speed is not asserted here (timings flake on shared runners): bench/lint_speed.py measures it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_gbfix
from tests.test_lint import findings, where, write

MODEL = """
    import torch
    from torch import nn


    class Net(nn.Module):
        def forward(self, x):
            print("net", x.shape)
            return x * 2


    class Other(nn.Module):
        def forward(self, x):
            return x.sum().item()
"""
RUN = """
    import torch

    from model import Net


    @torch.compile
    def step(x):
        print("step")  # compiled, but run.py is not given: not reported
        return x


    compiled = torch.compile(Net())
"""


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def git_repo(root: Path) -> Path:
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return root


def test_a_model_file_alone_is_checked_with_the_file_that_compiles_it(tmp_path):
    root = write(tmp_path, {"model.py": MODEL, "run.py": RUN})
    proc = run_gbfix("lint", "model.py", cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert findings(proc) == ["model.py:7:9: GB0059 likely: print() in compiled code"]  # Other is never compiled
    assert proc.stderr.strip() == "1 likely graph break in 1 file (1 file checked, 1 compiled region)."  # step does not reach it
    # the file with the compile call, given alone, reports its own breaks only
    proc = run_gbfix("lint", "run.py", cwd=root)
    assert where(findings(proc)) == [("run.py:8:5", "GB0059")]


def test_files_outside_the_project_are_linted_with_their_own(tmp_path):
    repo = write(tmp_path / "repo", {"model.py": MODEL, "run.py": RUN, ".gitignore": "scratch/\n"})
    git_repo(repo)
    # ignored by git, so outside the work tree's files; given, it is linted all the same
    write(repo, {"scratch/model.py": MODEL.replace("Net", "Scratch"), "scratch/run.py": RUN.replace("Net", "Other")})
    other = write(tmp_path / "elsewhere", {"model.py": MODEL, "train.py": "import torch\nfrom model import Other\ntorch.compile(Other())\n"})
    proc = run_gbfix("lint", "model.py", "scratch/model.py", str(other / "model.py"), cwd=repo)
    lines = findings(proc)
    assert where(lines) == [
        (f"{other / 'model.py'}:13:16", "GB0124"),  # compiled by elsewhere/train.py, a folder of its own
        ("model.py:7:9", "GB0059"),  # compiled by run.py, tracked
    ]
    # scratch/run.py compiles its own model.py's Other; nothing ignored is searched for compile calls
    assert not any(line.startswith("scratch/") for line in lines)


def test_config_targets_are_the_project(tmp_path):
    root = write(tmp_path, {
        "pyproject.toml": '[tool.gbfix]\ntargets = ["src", "scripts"]\n',
        "src/pkg/__init__.py": "",
        "src/pkg/model.py": MODEL,
        "scripts/train.py": "import torch\nfrom pkg.model import Net\ntorch.compile(Net())\n",
        "notebooks/try.py": "import torch\nfrom pkg.model import Other\ntorch.compile(Other())\n",  # not a target
    })
    proc = run_gbfix("lint", "src/pkg/model.py", cwd=root)
    assert where(findings(proc)) == [("src/pkg/model.py:7:9", "GB0059")]
    assert "1 compiled region)" in proc.stderr


def test_git_work_tree_tracked_and_untracked_not_ignored(tmp_path):
    root = write(tmp_path, {"model.py": MODEL, "run.py": RUN, ".gitignore": "local_*.py\n"})
    git_repo(root)
    write(root, {
        "bench.py": "import torch\nfrom model import Other\ntorch.compile(Other())\n",  # untracked, not ignored
        "local_try.py": "import torch\nfrom model import Other\ntorch.compile(Other())\n",  # ignored
    })
    proc = run_gbfix("lint", "model.py", cwd=root)
    assert where(findings(proc)) == [("model.py:7:9", "GB0059"), ("model.py:13:16", "GB0124")]
    (root / "bench.py").unlink()
    proc = run_gbfix("lint", "model.py", cwd=root)
    assert where(findings(proc)) == [("model.py:7:9", "GB0059")]  # local_try.py's compile call is not seen
    # from a subfolder too: the work tree is the repository's
    write(root, {"sub/keep.py": "x = 1\n"})
    proc = run_gbfix("lint", "../model.py", cwd=root / "sub")
    assert where(findings(proc)) == [(f"{root.resolve() / 'model.py'}:7:9", "GB0059")]  # outside the current folder: in full


NO_COMPILE = {
    "model.py": """
        import torch
        from torch import nn

        from helpers import norm


        class Block(nn.Module):
            def forward(self, x):
                print("block")
                return norm(x)


        class Plain:
            def forward(self, x):
                print("not a module")  # not an nn.Module: not taken as compiled
                return x
    """,
    "helpers.py": """
        def norm(x):
            return x / x.abs().max().item()
    """,
}


def test_no_compile_call_takes_module_forwards_as_compiled(tmp_path):
    root = write(tmp_path, NO_COMPILE)
    proc = run_gbfix("lint", "model.py", "helpers.py", cwd=root)
    assert proc.returncode == 1
    assert findings(proc) == [
        "helpers.py:2:16: GB0124 likely: .item() turns a tensor into a Python number (via Block.forward, assumed compiled)",
        "model.py:9:9: GB0059 likely: print() in compiled code (via Block.forward, assumed compiled)",
    ]
    # said once, in one line on stderr
    notice = "No torch.compile call found in the project, so the forward of each nn.Module in the files checked is taken as compiled."
    assert proc.stderr.splitlines() == [f"{notice} 2 likely graph breaks in 2 files (2 files checked, 1 compiled region)."]
    data = json.loads(run_gbfix("lint", "--output-format", "json", "model.py", cwd=root).stdout)
    assert [(f["path"], f["via"]) for f in data["findings"]] == [("model.py", "Block.forward, assumed compiled")]
    assert data["regions"] == ["Block.forward (model.py:8, assumed)"]
    github = run_gbfix("lint", "--output-format", "github", "model.py", cwd=root).stdout
    assert "via Block.forward, assumed compiled" in github
    sarif = json.loads(run_gbfix("lint", "--output-format", "sarif", "model.py", cwd=root).stdout)
    assert "via Block.forward, assumed compiled" in sarif["runs"][0]["results"][0]["message"]["text"]
    # a compile call anywhere in the project: no assumption, and Block is not compiled
    write(root, {"train.py": "import torch\n\n@torch.compile\ndef f(x):\n    return x\n"})
    proc = run_gbfix("lint", "model.py", cwd=root)
    assert (proc.returncode, proc.stdout) == (0, "")
    assert proc.stderr.strip() == "No compiled code found (1 file checked): no torch.compile call in the project (3 files) reaches them."


def test_pre_commit_style_several_files(tmp_path):
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/layers.py": """
            from torch import nn


            class Layer(nn.Module):
                def forward(self, x):
                    if x.sum() > 0:
                        x = -x
                    return x
        """,
        "pkg/model.py": """
            from torch import nn

            from pkg.layers import Layer


            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.layers = nn.ModuleList([Layer() for _ in range(2)])

                def forward(self, x):
                    for layer in self.layers:
                        x = layer(x)
                    print(x)
                    return x
        """,
        "pkg/data.py": "def load():\n    print('loading')\n",
        "train.py": "import torch\nfrom pkg.model import Model\nmodel = torch.compile(Model())\nprint(model)\n",
    })
    git_repo(root)
    # what pre-commit runs for a commit that touched these three files
    proc = run_gbfix("lint", "pkg/layers.py", "pkg/model.py", "pkg/data.py", cwd=root)
    assert proc.returncode == 1
    assert where(findings(proc)) == [("pkg/layers.py:6:12", "GB0170"), ("pkg/model.py:14:9", "GB0059")]
    assert proc.stderr.strip() == "2 likely graph breaks in 2 files (3 files checked, 1 compiled region)."


def test_cache_follows_edits(tmp_path, monkeypatch):
    """With the cache on, a second run gives the same result, and an edit to the model file or
    to the file that compiles it is seen (entries are keyed by mtime and size)."""
    root = write(tmp_path / "p", {"model.py": MODEL, "run.py": RUN, "util.py": "def f():\n    return 1\n"})
    env = {**os.environ, "GBFIX_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("GBFIX_NO_CACHE")
    past = time.time() - 100

    def age(*names: str) -> None:  # files changed just now are not cached (mtime resolution)
        for n in names:
            os.utime(root / n, (past, past))

    age("model.py", "run.py", "util.py")
    expected = ["model.py:7:9: GB0059 likely: print() in compiled code"]
    for _ in range(2):
        proc = run_gbfix("lint", "model.py", cwd=root, env=env)
        assert findings(proc) == expected
    assert list((tmp_path / "cache" / "lint").glob("*.json"))
    # the model changes: a new break in a compiled method
    (root / "model.py").write_text((root / "model.py").read_text().replace("return x * 2", "return x * x.max().item()"))
    os.utime(root / "model.py", (past + 1, past + 1))
    proc = run_gbfix("lint", "model.py", cwd=root, env=env)
    assert where(findings(proc)) == [("model.py:7:9", "GB0059"), ("model.py:8:20", "GB0124")]
    # the compile call changes: Other becomes compiled too
    (root / "run.py").write_text((root / "run.py").read_text().replace("from model import Net", "from model import Net, Other") + "torch.compile(Other())\n")
    os.utime(root / "run.py", (past + 2, past + 2))
    proc = run_gbfix("lint", "model.py", cwd=root, env=env)
    assert where(findings(proc)) == [("model.py:7:9", "GB0059"), ("model.py:8:20", "GB0124"), ("model.py:13:16", "GB0124")]
    # a file that mentions compiling only in a comment, then gains a compile call
    (root / "util.py").write_text("# compile nothing here\ndef f():\n    return 1\n")
    age("util.py")
    run_gbfix("lint", "model.py", cwd=root, env=env)
    (root / "util.py").write_text("import torch\nfrom model import Net\n\n@torch.compile\ndef g(x):\n    print(x)\n    return Net()(x)\n")
    os.utime(root / "util.py", (past + 3, past + 3))
    proc = run_gbfix("lint", "util.py", cwd=root, env=env)
    assert where(findings(proc)) == [("util.py:6:5", "GB0059")]


@pytest.mark.parametrize("layout", ["folder", "package"])
def test_folder_without_git_or_config(tmp_path, layout):
    # the folder of the file, or the top of its package when it is in one
    files = {"run.py": RUN.replace("from model import Net", "from lib.model import Net"), "lib/model.py": MODEL}
    if layout == "package":
        files["lib/__init__.py"] = ""
    root = write(tmp_path, files)
    proc = run_gbfix("lint", "lib/model.py", cwd=root)
    got = where(findings(proc))
    if layout == "package":
        assert got == [("lib/model.py:7:9", "GB0059")]
    else:  # lib/ is a folder of its own: run.py is outside it, and nothing there is compiled
        assert got == [("lib/model.py:7:9", "GB0059"), ("lib/model.py:13:16", "GB0124")]
        assert proc.stderr.startswith("No torch.compile call found in the project")


@pytest.mark.parametrize(("text", "may"), [
    ("model = torch.compile(Net())", True),
    ("model = torch.compile (Net())", True),
    ("@torch.compile\ndef f(x):\n    return x", True),
    ("    @torch._dynamo.optimize('eager')\n    def f(x): ...", True),
    ("model.compile()", True),
    ("opt = optimize(f)", True),
    ("PATTERN = re.compile(r'x')", False),  # never torch.compile
    ("PATTERN = regex.compile(r'x')", False),
    ('"""Meant for torch.compile."""', False),  # a word in prose
    ("# we compile it in train.py", False),
    ("if is_compiling(): pass", False),
])
def test_the_text_scan_keeps_every_file_that_may_compile(text, may):
    from gbfix.lint.facts import scan

    assert scan(text.encode()).may_compile is may
