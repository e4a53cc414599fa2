"""library-logger: a library module's logger called in compiled code, fixed from the
user's side by binding the module's logger global where the program starts.

tests/fixtures/library_logger: loglib (not a target) logs from its compiled forward
through two module loggers: a transformers-style `get_logger` + `warning_once` in a
method, and a `logging.getLogger` one in a plain function, in a call over several
lines, reached from a method that uses `super()` (which library-patch cannot copy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from gbfix import engine
from gbfix.entry import parse as parse_entry
from gbfix.recipes.layout import add_helpers
from gbfix.recipes.library_logger import _logging_calls

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "library_logger"


def _run(folder: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "run"], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout


def _library(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in (folder / "loglib").rglob("*.py")}


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("library_logger")
    shutil.copytree(FIXTURE, folder, dirs_exist_ok=True)
    before, library = _run(folder), _library(folder)
    script = (folder / "run.py").resolve()
    result = engine.fix([script], parse_entry("python -m run", folder), engine.Options())
    return folder, script, before, library, result


def test_both_loggers_bound_in_the_entry(fixed):
    folder, script, before, library, result = fixed
    assert sorted(o.edit.recipe for o in result.outcomes if o.status == "applied") == ["library-logger"] * 2
    assert result.remaining == 0 and set(result.fixed) == {script}
    text = result.fixed[script].decode()
    # the module's default logger name needs no argument; another name is given
    assert 'gbfix_leaf_logger("loglib.model")\n' in text
    assert 'gbfix_leaf_logger("loglib.layers", "_logger")\n' in text
    # the helpers come before the lines that call them, after the program's imports
    assert text.index("def gbfix_leaf_logger(") < text.index('gbfix_leaf_logger("loglib.')
    assert text.index("from loglib import Encoder") < text.index("def gbfix_log_leaf(")


def test_fixed_program_logs_the_same_and_library_is_untouched(fixed):
    folder, script, before, library, result = fixed
    assert "WARNING loglib.model: `return_dict` is deprecated" in before
    script.write_bytes(result.fixed[script])
    try:
        assert _run(folder) == before
        assert _library(folder) == library
        again = engine.fix([script], parse_entry("python -m run", folder), engine.Options())
        assert again.findings == () and again.fixed == {}
    finally:
        shutil.copy(FIXTURE / "run.py", script)


STEPS = """\
import torch

from loglib import Encoder


def main():
    model = Encoder().eval()
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        print(compiled(torch.ones(3, 8), return_dict=True).sum().item())
"""


def test_a_module_others_import_is_not_where_the_binding_goes(tmp_path):
    """The compiled call in a module the entry imports, and only that module a target:
    binding a library's logger is process-wide, so library-logger is not used there. The
    one edit is library-patch's copy of loglib.layers.gelu_scaled (a module-level function
    that logs), which goes after the file's imports as a patch of a class does; the
    `warning_once` in Encoder.forward is left."""
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    (tmp_path / "steps.py").write_text(STEPS)
    (tmp_path / "run.py").write_text("from steps import main\n\nmain()\n")
    steps = (tmp_path / "steps.py").resolve()
    result = engine.fix([steps], parse_entry("python run.py", tmp_path), engine.Options())
    applied = [o.edit for o in result.outcomes if o.status == "applied"]
    assert [e.recipe for e in applied] == ["library-patch"]
    assert "loglib.layers.gelu_scaled = _gbfix_fixed_gelu_scaled" in result.fixed[steps].decode()
    assert [f.status for f in result.findings if f.code == "GB0291"].count("unfixed") == 1


def test_loggers_found_by_ast(tmp_path):
    lib = tmp_path / "lib.py"
    lib.write_text(
        "import logging\n"
        "from logging import getLogger\n"
        "logger = logging.getLogger(__name__)\n"
        "log: logging.Logger = getLogger('x')\n"
        "again = logging.getLogger('y')\n"
        "again = None\n"
        "moved = logging.getLogger('z')\n"
        "def f():\n"
        "    global moved\n"
        "    logger.warning(\n"
        "        'a %s',\n"
        "        1,\n"
        "    )\n"
        "    log.info('b')\n"
        "    again.info('c')\n"
        "    logger.exception('d')\n"
    )
    st = os.stat(lib)
    loggers, calls = _logging_calls(str(lib), (st.st_mtime_ns, st.st_size))
    # bound twice, or declared global (rebound at run time): not a logger the binding can replace
    assert loggers == {"logger", "log"}
    # a call over several lines spans them; `exception` logs the exception being handled, left out
    assert calls == (("logger", 10, 13), ("log", 14, 14), ("again", 15, 15))


def test_helpers_go_before_a_call_of_a_public_helper():
    module = cst.parse_module('import torch\n\ngbfix_leaf_logger("lib")\n')
    out = add_helpers(module, {"gbfix_leaf_logger": "def gbfix_leaf_logger(module):\n    pass\n"}).code
    assert out.index("def gbfix_leaf_logger") < out.index('gbfix_leaf_logger("lib")')


STAND_IN_PROGRAM = """\
import importlib, logging, sys
import torch
from gbfix.recipes.leaf_helpers import LEAF_LOGGER, LOG_LEAF

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s")
logger = logging.getLogger("lib")


def forward(x):
    logger.info("shape %s", x.shape)
    logger.info("mean %s", x.mean())
    logger.warning("plain %s %d %s", "a", 3, None)
    logger.warning(msg="keyword")
    return x + 1


if sys.argv[1:] == ["--stand-in"]:
    exec(LOG_LEAF.code + LEAF_LOGGER.code)
    gbfix_leaf_logger("__main__")
print(torch.compile(forward, backend="eager")(torch.ones(2, 3, requires_grad=True)).sum())
print("breaks", sum(torch._dynamo.utils.counters["graph_break"].values()))
"""


def test_the_stand_in_leaves_a_call_whose_text_could_change_to_the_logger(tmp_path):
    """Only the call with text, numbers and None goes to the leaf function: a torch.Size
    (a tuple at the leaf boundary), a tensor that requires grad (detached there) and a
    keyword argument go to the logger itself and break as before, so every line is the same."""
    script = tmp_path / "prog.py"
    script.write_text(STAND_IN_PROGRAM)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    plain, stand_in = (
        subprocess.run([sys.executable, str(script), *flag], capture_output=True, text=True, check=True, env=env).stdout
        for flag in ([], ["--stand-in"])
    )
    assert "INFO lib: shape torch.Size([2, 3])" in plain and "grad_fn=<MeanBackward0>" in plain
    assert stand_in.replace("breaks 3", "breaks 4") == plain
    assert "breaks 4" in plain and "breaks 3" in stand_in
