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


def test_new_helpers_go_after_the_helpers_and_settings_there_already():
    # A config route's setting sits between the imports and the helpers an earlier round
    # wrote; a helper that uses those must follow them, not land under the imports.
    from gbfix.recipes.layout import add_helpers

    module = cst.parse_module(
        "import torch\n"
        "\n"
        "# gbfix: ...\n"
        "torch._dynamo.config.capture_scalar_outputs = True\n"
        "\n"
        "\n"
        "def _gbfix_op(name):\n"
        "    return name\n"
        "\n"
        "\n"
        "def f(x):\n"
        "    return x\n"
    )
    code = add_helpers(module, {"_gbfix_print_op": "_gbfix_print_op = _gbfix_op('print')\n"}).code
    assert code.index("def _gbfix_op(") < code.index("_gbfix_print_op = _gbfix_op(") < code.index("def f(")


def test_a_standard_library_import_goes_among_the_standard_library_ones():
    from gbfix.recipes.layout import with_stdlib_imports

    def placed(code: str, *names: str) -> str | None:
        out = with_stdlib_imports(cst.parse_module(code), sorted(names))
        return None if out is None else out.code

    # in the order of the module names, within the standard library's group
    assert placed('"""doc."""\nimport logging\nimport warnings\n\nimport torch\n', "operator", "io") == (
        '"""doc."""\nimport io\nimport logging\nimport operator\nimport warnings\n\nimport torch\n'
    )
    assert placed("from typing import Optional\n\nimport torch\n", "operator") == (
        "import operator\nfrom typing import Optional\n\nimport torch\n"
    )
    # no standard-library import yet: a group of its own, first, after `from __future__`
    assert placed("from __future__ import annotations\n\nimport numpy as np\nimport torch\n", "math") == (
        "from __future__ import annotations\n\nimport math\n\nimport numpy as np\nimport torch\n"
    )
    # no import at the head: left to AddImportsVisitor
    assert placed('"""doc."""\nx = 1\n', "math") is None
