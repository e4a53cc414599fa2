"""warn-to-leaf and logger-to-leaf at run time: the rewritten module, in a package whose
generated module holds the factories, compiled with fullgraph=True on the eager backend,
warns and logs what the original does uncompiled, and no global's name travels as a string."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gbfix import generated
from gbfix.recipes.logging_call import LoggerToLeaf
from gbfix.recipes.warn_call import WarnToLeaf
from tests.helpers import ALL_CAPABILITIES, rewrite_line

MODULE = textwrap.dedent('''\
    import logging
    import warnings

    import torch

    logger = logging.getLogger("model")


    class LegacyWarning(UserWarning):
        pass


    def step(x, sizes):
        warnings.warn("legacy path", LegacyWarning)
        warnings.warn(f"rows {x.shape[0]}", FutureWarning, stacklevel=2)
        logger.warning("sizes %s of %s", sizes, x)
        return x + 1


    def settle(x, sizes):
        for _ in range(2):
            if x.sum() > 0:  # data-dependent, in a loop: Dynamo leaves this frame to eager
                x = x - 1
        warnings.warn("settled", LegacyWarning)
        logger.warning("settled at %s", sizes)
        return x
''')

# Runs the module's step compiled (fullgraph: any break fails) or not, and prints what it warned and logged.
DRIVER = textwrap.dedent('''\
    import json, logging, sys, warnings
    import torch
    from pkg import model
    records = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append([r.name, r.levelname, r.getMessage()])
    logging.getLogger("model").addHandler(handler)
    fn = getattr(model, sys.argv[2])
    if sys.argv[1] == "compiled":
        fn = torch.compile(fn, backend="eager", fullgraph=sys.argv[2] == "step")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            fn(torch.ones(3), [3, 4])
    print(json.dumps({
        "warnings": [[w.category.__name__, str(w.message), w.filename.rsplit("/", 1)[-1]] for w in seen],
        "logs": records,
    }))
''')


def _rewrite(source: str, path: Path) -> str:
    for recipe, needle, code in (
        (WarnToLeaf, "warnings.warn(\"legacy", "GB0007"),
        (WarnToLeaf, "warnings.warn(f\"rows", "GB0007"),
        (LoggerToLeaf, "logger.warning(\"sizes", "GB0291"),
        (WarnToLeaf, "warnings.warn(\"settled", "GB0007"),
        (LoggerToLeaf, "logger.warning(\"settled", "GB0291"),
    ):
        out = rewrite_line(source, recipe, needle, code, capabilities=ALL_CAPABILITIES, path=path)
        assert out is not None, needle
        source = out
    return source


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("leaf")
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(MODULE)
    original, settled = _run(root, "eager"), _run(root, "compiled", "settle")
    rewritten = _rewrite(MODULE, pkg / "model.py")
    (pkg / "model.py").write_text(rewritten)
    for path, data in generated.complete({pkg / "model.py": rewritten.encode()}).items():
        path.write_bytes(data)
    return {
        "rewritten": rewritten, "original": original, "compiled": _run(root, "compiled"), "eager": _run(root, "eager"),
        "settled": settled, "settled_rewritten": _run(root, "compiled", "settle"),
    }


def _run(root: Path, mode: str, function: str = "step") -> dict:
    (root / "driver.py").write_text(DRIVER)
    env = dict(os.environ, TORCH_LOGS="graph_breaks")
    proc = subprocess.run([sys.executable, "driver.py", mode, function], cwd=root, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # where Dynamo broke: (file name, the line's text)
    breaks = {(Path(f).name, Path(f).read_text().splitlines()[int(n) - 1].strip()) for f, n in re.findall(r"Graph break .*in user code at (\S+):(\d+)", proc.stderr)}
    return dict(json.loads(proc.stdout.splitlines()[-1]), breaks=sorted(breaks))


def test_the_module_builds_one_helper_per_category_and_logger(package):
    text = package["rewritten"]
    assert "from ._gbfix import gbfix_log_leaf, gbfix_warn_leaf\n" in text
    for line in (
        "_gbfix_warn_LegacyWarning = gbfix_warn_leaf(lambda: LegacyWarning)\n",
        "_gbfix_warn_FutureWarning = gbfix_warn_leaf(lambda: FutureWarning)\n",
        "_gbfix_log_logger = gbfix_log_leaf(lambda: logger)\n",
    ):
        assert text.count(line) == 1, text
    assert '    _gbfix_warn_LegacyWarning("legacy path")\n' in text
    assert '    _gbfix_warn_FutureWarning(f"rows {x.shape[0]}", 2)\n' in text
    assert '    _gbfix_log_logger("warning", "sizes %s of %s", sizes, x)\n' in text
    # no global's name as a string, nothing of the factories in the module
    assert '"LegacyWarning"' not in text and '"logger"' not in text and "globals()" not in text
    assert "leaf_function" not in text


def test_compiled_with_fullgraph_it_warns_and_logs_as_the_original(package):
    original, compiled = package["original"], package["compiled"]
    assert compiled["logs"] == original["logs"] == [["model", "WARNING", "sizes [3, 4] of tensor([1., 1., 1.])"]] * 2
    assert [w[:2] for w in compiled["warnings"]] == [w[:2] for w in original["warnings"]]
    assert [w[:2] for w in original["warnings"]] == [["LegacyWarning", "legacy path"], ["FutureWarning", "rows 3"]] * 2
    # stacklevel 1: the warning names the module that warns (its filters and registry), as before
    assert compiled["warnings"][0][2] == original["warnings"][0][2] == "model.py"


def test_uncompiled_the_rewritten_module_behaves_the_same(package):
    eager, original = package["eager"], package["original"]
    assert eager["logs"] == original["logs"]
    assert [w[:2] for w in eager["warnings"]] == [w[:2] for w in original["warnings"]]
    # uncompiled, the helpers warn from the caller's line, stacklevel included
    assert eager["warnings"] == original["warnings"]


def test_called_from_a_frame_dynamo_leaves_to_eager_the_helpers_do_not_break(package):
    # The leaf function's own frame, called eagerly, would be compiled and break at the
    # warning and the logger (torch 2.13); the helpers call them directly there instead.
    before, after = package["settled"], package["settled_rewritten"]
    assert after["logs"] == before["logs"] == [["model", "WARNING", "settled at [3, 4]"]] * 2
    assert [w[:2] for w in after["warnings"]] == [w[:2] for w in before["warnings"]] == [["LegacyWarning", "settled"]] * 2
    assert before["breaks"] == after["breaks"] == [("model.py", "if x.sum() > 0:  # data-dependent, in a loop: Dynamo leaves this frame to eager")]
