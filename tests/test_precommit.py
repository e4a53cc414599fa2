"""The pre-commit hooks, run by the real pre-commit.

gbfix-lint through `pre-commit try-repo` on a snapshot of this working tree (pre-commit
builds a fresh virtualenv with gbfix and its dependencies, libcst and click: no torch);
gbfix-check as the `repo: local` hook the README shows (`language: system`: the gbfix
and torch installed here).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pre_commit")
yaml = pytest.importorskip("yaml")  # a dependency of pre-commit

pytestmark = [pytest.mark.xdist_group("test_precommit"), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
if not shutil.which("git"):
    pytest.skip("pre-commit needs git", allow_module_level=True)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.update(
        PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"),
        PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),  # the gbfix installed here
        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
        GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
    )
    return env


def _git(*args: str, cwd: Path, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _snapshot(dest: Path, env: dict[str, str]) -> Path:
    """This working tree as a one-commit git repo: try-repo clones a repo, and takes only
    the tracked changes of a dirty one (not a new hook file that is not committed yet)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, env=env)
    if listed.returncode == 0:
        dest.mkdir()
        for name in filter(None, listed.stdout.decode().split("\0")):
            src, to = ROOT / name, dest / name
            if os.path.lexists(src):
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, to, follow_symlinks=False)
    else:  # not a git checkout (an sdist): copy the tree
        shutil.copytree(ROOT, dest, symlinks=True, ignore=shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".*cache"))
    _git("init", "-q", cwd=dest, env=env)
    _git("add", "-A", cwd=dest, env=env)
    _git("commit", "-q", "-m", "snapshot", cwd=dest, env=env)
    return dest


def _precommit(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_lint_hook_through_try_repo(tmp_path):
    env = _env(tmp_path)
    gbfix_repo = _snapshot(tmp_path / "gbfix", env)
    user = tmp_path / "user"
    user.mkdir()
    (user / "model.py").write_text("import torch\n\n\n@torch.compile\ndef step(x):\n    print('step')\n    return x * 2\n")
    (user / "clean.py").write_text("def add(a, b):\n    return a + b\n")
    _git("init", "-q", cwd=user, env=env)
    _git("add", "-A", cwd=user, env=env)
    proc = _precommit("try-repo", str(gbfix_repo), "gbfix-lint", "--all-files", cwd=user, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert re.search(r"gbfix lint \(likely torch.compile graph breaks\)\.+Failed", out), out
    assert "model.py:6:5: GB0059 likely: print() in compiled code" in out
    assert "1 likely graph break in 1 file (2 files checked, 1 compiled region)." in out  # one run for all files

    (user / "model.py").write_text("import torch\n\n\n@torch.compile\ndef step(x):\n    return x * 2\n")
    _git("add", "-A", cwd=user, env=env)
    proc = _precommit("try-repo", str(gbfix_repo), "gbfix-lint", "--all-files", cwd=user, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"gbfix lint \(likely torch.compile graph breaks\)\.+Passed", proc.stdout), proc.stdout


def _readme_local_config() -> str:
    """The README's `.pre-commit-config.yaml` for gbfix-check, verbatim."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return next(b for b in blocks if "repo: local" in b and "gbfix-check" in b)


def test_check_hook_as_a_local_hook(tmp_path):
    config = _readme_local_config()
    hook = yaml.safe_load(config)["repos"][0]["hooks"][0]
    manifest = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    for k in ("entry", "language", "pass_filenames", "require_serial", "stages", "types"):
        assert hook[k] == manifest["gbfix-check"][k], k  # the README and the hook repo agree

    env = _env(tmp_path)
    user = tmp_path / "user"
    (user / "pkg").mkdir(parents=True)
    (user / "pkg" / "__init__.py").write_text("")
    (user / "pkg" / "model.py").write_text(
        textwrap.dedent(
            """\
            import torch


            @torch.compile(backend="eager")
            def known(x):
                print("known")
                return x + 1


            @torch.compile(backend="eager")
            def fresh(x):
                if x.sum() > 0:
                    return x * 2
                return x
            """
        )
    )
    (user / "run.py").write_text("import torch\nfrom pkg.model import fresh, known\n\nprint(known(torch.ones(2)), fresh(torch.ones(2)))\n")
    (user / "pyproject.toml").write_text('[tool.gbfix]\nentry = "python run.py"\n')
    (user / ".gbfix-baseline.json").write_text('{"version": 1, "breaks": [{"code": "GB0059", "path": "pkg/model.py", "function": "known", "count": 1}]}\n')
    (user / ".pre-commit-config.yaml").write_text(config)
    _git("init", "-q", cwd=user, env=env)
    _git("add", "-A", cwd=user, env=env)
    proc = _precommit("run", "gbfix-check", "--all-files", "--hook-stage", "manual", cwd=user, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "- hook id: gbfix-check" in out and "- exit code: 1" in out
    assert "pkg/model.py:12:8: GB0170 Data-dependent branching" in out and "(new: not in the baseline)" in out
    assert "GB0059" not in out  # in the baseline
    assert "Found 2 graph breaks: 1 new (not in .gbfix-baseline.json), 1 in the baseline." in out
