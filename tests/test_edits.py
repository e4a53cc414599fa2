"""edits.apply: imports a recipe needs are added once, and only when missing."""

from __future__ import annotations

import libcst as cst

from gbfix.edits import _imported


def _module(code: str) -> cst.Module:
    return cst.parse_module(code)


def test_top_level_imports_count_only_as_written():
    m = _module("import torch\nimport torch.nn as nn\nfrom torch import nn as q\nfrom a.b import c, d\nfrom . import e\nif x:\n    import y\n")
    assert _imported(m, "torch", None)
    assert _imported(m, "a.b", "c") and _imported(m, "a.b", "d")
    # an alias, a nested import or a relative one is not the import a recipe asked for
    assert not _imported(m, "torch.nn", None)
    assert not _imported(m, "torch", "nn")
    assert not _imported(m, "y", None)
    assert not _imported(m, "e", None)
    assert not _imported(m, "a.b", "x")
