"""library-class / library-class-unsafe: a break in a library class's method,
fixed by a subclass in the user's file.

Static tests build the break's stack by hand (the user's call, nn.Module's call
frames, the library method) over a package written to a temporary folder that
is not a target; one test runs the whole engine on such a folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import io
import logging
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gbfix import edits, engine, generated
from gbfix.entry import parse as parse_entry
from gbfix.locate import Locator
from gbfix.recipes.base import SiteContext
from gbfix.recipes.library_class import (
    _GUARD_CODE,
    LibraryClass,
    LibraryClassUnsafe,
    LibraryPatch,
    LibraryPatchUnsafe,
    source_digest,
)
from gbfix.records import Break, Cause, Edit, Frame
from gbfix.sources import read
from tests.helpers import ALL_CAPABILITIES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODULE_PY = "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py"
MACHINERY = (Frame(MODULE_PY, 1778, 19, 51, "_wrapped_call_impl"), Frame(MODULE_PY, 1789, 19, 48, "_call_impl"))

LAYERS = """\
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import exists

SCALE = 0.5


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
{body}


class Encoder(Block):
    pass


class Decoder(Block):
    def forward(self, x):
        return x
"""

PRINT_BODY = """\
        h = F.gelu(self.proj(x))
        if exists(mask):
            h = h * mask
        print(f"block norm {h.norm().item():.4f}")  # BREAK
        return x + SCALE * h"""

MODEL = """\
import torch
from torch import nn

from pkg import Block


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block(8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.block(x)  # CALL
        return self.head(h)
"""


def _frame(path: Path, text: str, marker: str, span: str, name: str) -> Frame:
    for n, line in enumerate(text.splitlines(), 1):
        if marker in line:
            col = line.index(span)
            return Frame(str(path), n, len(line[:col].encode()), len(line[: col + len(span)].encode()), name)
    raise AssertionError(f"no line marked {marker}")


def fix(
    tmp_path: Path,
    model: str = MODEL,
    body: str = PRINT_BODY,
    *,
    code: str = "GB0059",
    lib_span: str = "print(",
    call_span: str = "self.block(x)",
    method: str = "forward",
    recipe=LibraryClass,
    layers: str = LAYERS,
    machinery: bool = True,
) -> str | None:
    """Propose at the user's call marked ``# CALL``, the library frame at ``# BREAK``;
    the edited model.py, or None when the recipe declines."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.layers import Block, Decoder, Encoder\n")
    (tmp_path / "pkg" / "helpers.py").write_text("def exists(v):\n    return v is not None\n")
    lib_text = layers.format(body=textwrap.indent(textwrap.dedent(body), "        ").rstrip("\n"))
    lib_path = (tmp_path / "pkg" / "layers.py").resolve()
    lib_path.write_text(lib_text)
    user = (tmp_path / "model.py").resolve()
    user.write_text(model)
    stack = (
        _frame(user, model, "# CALL", call_span, "forward"),
        *(MACHINERY if machinery else ()),
        _frame(lib_path, lib_text, "# BREAK", lib_span, method),
    )
    return _propose(user, stack, code, recipe)


def _propose(user: Path, stack: tuple[Frame, ...], code: str, recipe) -> str | None:
    """The user's file with ``recipe``'s edit for a break of ``code`` with this stack, or None."""
    brk = Break((Cause(code, code, ""),), stack)
    locator = Locator({user: read(user)})
    site = locator.site(brk)
    parsed = locator.parsed(user)
    rw = recipe().propose(SiteContext(site, locator.node(site), parsed, ALL_CAPABILITIES))
    if rw is None:
        return None
    (s, e) = parsed.span(rw.original)
    edit = Edit(0, site, recipe.name, recipe.safety, rw.message, s, e, rw.original, rw.replacement, rw.imports)
    return edits.apply(parsed, [edit]).decode()


# --- what it writes ---------------------------------------------------------


def test_print_in_a_library_forward(tmp_path):
    assert fix(tmp_path) == '''\
import torch
from torch import nn

from pkg import Block
import torch.nn.functional as F
from pkg.helpers import exists
from pkg.layers import SCALE


# gbfix: pkg.layers.Block.forward, rewritten here so that it compiles without a
# graph break (gbfix does not edit pkg); constructed below instead of Block.
class _GbfixFixedBlock(Block):
    def forward(self, x, mask=None):
        h = F.gelu(self.proj(x))
        if exists(mask):
            h = h * mask
        torch._higher_order_ops.print("block norm {:.4f}", h.norm())  # BREAK
        return x + SCALE * h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _GbfixFixedBlock(8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.block(x)  # CALL
        return self.head(h)
'''


def test_without_module_call_frames(tmp_path):
    """The first compile reports the library frame right below the user's call."""
    assert "class _GbfixFixedBlock(Block):" in fix(tmp_path, machinery=False)


def test_an_import_the_user_file_already_has_is_not_repeated(tmp_path):
    model = MODEL.replace("from torch import nn\n", "from torch import nn\nimport torch.nn.functional as F\n")
    out = fix(tmp_path, model)
    assert out.count("import torch.nn.functional as F") == 1


def test_dotted_construction_and_module_import(tmp_path):
    model = MODEL.replace("from pkg import Block", "import pkg").replace("Block(8)", "pkg.Block(8)")
    out = fix(tmp_path, model)
    assert "class _GbfixFixedBlock(pkg.Block):" in out and "self.block = _GbfixFixedBlock(8)" in out


def test_a_subclass_that_inherits_the_method(tmp_path):
    """x_transformers' Encoder inherits forward from AttentionLayers."""
    model = MODEL.replace("import Block", "import Encoder").replace("Block(8)", "Encoder(8)")
    out = fix(tmp_path, model)
    assert "class _GbfixFixedEncoder(Encoder):" in out and "self.block = _GbfixFixedEncoder(8)" in out


def test_the_construction_picked_by_the_attribute_called(tmp_path):
    model = MODEL.replace("        self.head", "        self.skip = Block(8)\n        self.head")
    out = fix(tmp_path, model)
    assert "self.block = _GbfixFixedBlock(8)" in out and "self.skip = Block(8)" in out


def test_a_stack_of_blocks_built_by_a_comprehension(tmp_path):
    model = MODEL.replace("self.block = Block(8)", "self.blocks = nn.ModuleList([Block(8) for _ in range(3)])")
    model = model.replace("h = self.block(x)  # CALL", "for blk in self.blocks:\n            x = blk(x)  # CALL\n        h = x")
    out = fix(tmp_path, model, call_span="blk(x)")
    assert "self.blocks = nn.ModuleList([_GbfixFixedBlock(8) for _ in range(3)])" in out


def test_a_module_level_instance(tmp_path):
    model = """\
import torch

from pkg import Block

block = Block(8)


@torch.compile
def step(x):
    return block(x)  # CALL
"""
    out = fix(tmp_path, model, call_span="block(x)")
    assert "class _GbfixFixedBlock(Block):" in out and "\nblock = _GbfixFixedBlock(8)\n" in out
    assert out.index("class _GbfixFixedBlock") < out.index("block = _GbfixFixedBlock")


def test_a_literal_warning_goes_through_the_helper_in_the_users_file(tmp_path):
    body = """\
        warnings.warn("Block(mask=...) is deprecated", FutureWarning)  # BREAK
        return x + SCALE * self.proj(x)"""
    out = fix(tmp_path, body=body, code="GB0007", lib_span="warnings.warn(")
    assert "def gbfix_warn(" in out and "import warnings" in out
    assert 'gbfix_warn("Block(mask=...) is deprecated", FutureWarning)' in out


def test_an_unsafe_inner_recipe_makes_the_unsafe_recipe(tmp_path):
    body = """\
        h = self.proj(x)
        torch._dynamo.graph_break()  # BREAK
        return x + h"""
    safe, unsafe = tmp_path / "safe", tmp_path / "unsafe"
    safe.mkdir(), unsafe.mkdir()
    assert fix(safe, body=body, code="GB0025", lib_span="torch._dynamo.graph_break()") is None
    out = fix(unsafe, body=body, code="GB0025", lib_span="torch._dynamo.graph_break()", recipe=LibraryClassUnsafe)
    assert "graph_break" not in out and "class _GbfixFixedBlock(Block):" in out


# --- what it declines ---------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        'print("x")  # BREAK\nreturn super().forward(x)',
        'print("x")  # BREAK\nreturn self.__cache',
        'print("x", type(self).__name__)  # BREAK\nreturn x',
        'print("x", self.__class__)  # BREAK\nreturn x',
        'global SCALE\nprint("x")  # BREAK\nreturn x',
        'print("x", __name__)  # BREAK\nreturn x',
        'print("x", globals())  # BREAK\nreturn x',
    ],
    ids=["super", "mangled", "type-self", "class-attr", "global", "module-dunder", "globals"],
)
def test_methods_that_mean_something_else_elsewhere(tmp_path, body):
    assert fix(tmp_path, body=body, lib_span='print("x"') is None


def test_a_method_decorated_by_a_registry(tmp_path):
    """A decorator that is not torch's grad/autocast/jit marker may register the copy a second time."""
    layers = LAYERS.replace("SCALE = 0.5\n", "SCALE = 0.5\nHOOKS = []\n").replace(
        "    def forward(self, x, mask=None):", "    @HOOKS.append\n    def forward(self, x, mask=None):"
    )
    assert fix(tmp_path, layers=layers) is None


def test_a_method_under_torch_decorators(tmp_path):
    """The decorators come with the copy; the one applied as imported (autocast) is imported too."""
    layers = LAYERS.replace("from torch import nn\n", "from torch import nn\nfrom torch.amp import autocast\n").replace(
        "    def forward(self, x, mask=None):",
        "    @torch.jit.ignore\n    @autocast(\"cpu\", enabled=False)\n    def forward(self, x, mask=None):",
    )
    out = fix(tmp_path, layers=layers)
    assert "from torch.amp import autocast" in out
    assert (
        "class _GbfixFixedBlock(Block):\n"
        "    @torch.jit.ignore\n"
        '    @autocast("cpu", enabled=False)\n'
        "    def forward(self, x, mask=None):\n"
    ) in out
    assert 'torch._higher_order_ops.print("block norm {:.4f}", h.norm())  # BREAK' in out


def test_a_name_bound_differently_in_the_users_file(tmp_path):
    model = MODEL.replace("from pkg import Block\n", "from pkg import Block\n\nSCALE = 2.0\n")
    assert fix(tmp_path, model) is None


def test_a_method_overridden_by_the_constructed_class(tmp_path):
    model = MODEL.replace("import Block", "import Decoder").replace("Block(8)", "Decoder(8)")
    assert fix(tmp_path, model) is None


def test_no_construction_in_the_file(tmp_path):
    model = MODEL.replace("self.block = Block(8)", "self.block = block")
    model = model.replace("def __init__(self):", "def __init__(self, block):")
    assert fix(tmp_path, model) is None


def test_two_constructions_and_a_call_that_names_neither(tmp_path):
    model = MODEL.replace("self.block = Block(8)", "self.blocks = nn.ModuleList([Block(8), Block(8)])")
    model = model.replace("h = self.block(x)  # CALL", "h = self.blocks[0](x)  # CALL")
    assert fix(tmp_path, model, call_span="self.blocks[0](x)") is None


def test_a_class_imported_inside_a_function(tmp_path):
    model = MODEL.replace("from pkg import Block\n", "").replace(
        "        super().__init__()\n", "        super().__init__()\n        from pkg import Block\n"
    )
    assert fix(tmp_path, model) is None


def test_no_recipe_for_the_copied_method(tmp_path):
    body = """\
        print(f"block", file=self.log)  # BREAK
        return x"""
    assert fix(tmp_path, body=body) is None


# --- the whole engine ---------------------------------------------------------


def test_engine_fixes_a_break_in_a_package_outside_the_targets(tmp_path):
    """One real run: the package folder is not a target and stays as it was."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.layers import Block\n")
    (pkg / "helpers.py").write_text("def exists(v):\n    return v is not None\n")
    layers = LAYERS.format(body=PRINT_BODY.replace("  # BREAK", ""))
    (pkg / "layers.py").write_text(layers)
    (tmp_path / "model.py").write_text(MODEL.replace("  # CALL", ""))
    (tmp_path / "run.py").write_text(
        "import torch\n\nfrom model import Net\n\n"
        "torch.manual_seed(0)\n"
        'net = torch.compile(Net(), backend="eager")\n'
        "for _ in range(2):\n"
        '    print(f"{net(torch.randn(2, 8)).sum().item():.4f}")\n'
    )
    targets = [tmp_path / "run.py", tmp_path / "model.py"]
    result = engine.fix(targets, parse_entry("python run.py", tmp_path), engine.Options())
    applied = [o.edit.recipe for o in result.outcomes if o.status == "applied"]
    assert "library-class" in applied
    assert result.remaining == 0
    assert set(result.fixed) == {(tmp_path / "model.py").resolve()}
    assert "class _GbfixFixedBlock(Block):" in result.fixed[(tmp_path / "model.py").resolve()].decode()
    assert (pkg / "layers.py").read_text() == layers


# --- library-patch: a class the library builds itself -------------------------

ALONE = LAYERS.split("\n\nclass Encoder")[0] + "\n"  # Block without the subclasses the file derives from it

OUTER = """\
from torch import nn

from .layers import Block


class Net(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.block = Block(dim)

    def forward(self, x):
        return self.block(x)  # OUTER
"""

SCRIPT = """\
import torch

from pkg.model import Net

model = torch.compile(Net())
print(model(torch.randn(2, 8)))  # CALL
"""


def patch(
    tmp_path: Path,
    script: str = SCRIPT,
    body: str = PRINT_BODY,
    *,
    layers: str = ALONE,
    outer: str = OUTER,
    code: str = "GB0059",
    lib_span: str = "print(",
    recipe=LibraryPatch,
    below: tuple[Frame, ...] = (),
    package: str = "pkg",
) -> str | None:
    """Propose at the script's call marked ``# CALL``, which calls <package>.model.Net
    (``# OUTER``), which calls <package>.layers.Block (``# BREAK``); the edited script,
    or None when the recipe declines."""
    folder = tmp_path.joinpath(*package.split("."))
    folder.mkdir(parents=True)
    for parent in (folder, *folder.relative_to(tmp_path).parents[:-1]):
        (tmp_path / parent / "__init__.py").touch()
    (folder / "helpers.py").write_text("def exists(v):\n    return v is not None\n")
    lib_text = layers.format(body=textwrap.indent(textwrap.dedent(body), "        ").rstrip("\n"))
    lib_path = (folder / "layers.py").resolve()
    lib_path.write_text(lib_text)
    outer_path = (folder / "model.py").resolve()
    outer_path.write_text(outer)
    user = (tmp_path / "run.py").resolve()
    user.write_text(script)
    stack = (
        _frame(user, script, "# CALL", "model(torch.randn(2, 8))", "<module>"),
        *MACHINERY,
        _frame(outer_path, outer, "# OUTER", "self.block(x)", "forward"),
        *MACHINERY,
        _frame(lib_path, lib_text, "# BREAK", lib_span, "forward"),
        *below,
    )
    return _propose(user, stack, code, recipe)



def test_patch_a_class_the_library_builds(tmp_path):
    """pkg.model.Net builds pkg.layers.Block; the script builds only Net."""
    out = patch(tmp_path)
    lib = (tmp_path / "pkg" / "layers.py").read_text().splitlines(keepends=True)
    assert out == '''\
import torch

from pkg.model import Net


def _gbfix_unchanged(module, qualname, digest):
    """Whether the library function ``module.qualname`` is still the code gbfix
    fixed (the start of the sha256 of its source): on any other version of the
    library the patch stays off."""
    import hashlib  # here, not at the top: nothing else in this file needs them
    import importlib
    import inspect

    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        source = inspect.getsource(obj)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    return hashlib.sha256(source.encode()).hexdigest()[: len(digest)] == digest


# gbfix: pkg.layers.Block.forward breaks the compiled graph, and gbfix does not edit
# pkg: while that method is the code fixed here, pkg builds this subclass instead.
if _gbfix_unchanged("pkg.layers", "Block.forward", "{digest}"):
    import pkg.layers
    import pkg.model
    import torch.nn.functional as F
    from pkg.layers import SCALE, exists

    class _GbfixFixedBlock(pkg.layers.Block):
        def forward(self, x, mask=None):
            h = F.gelu(self.proj(x))
            if exists(mask):
                h = h * mask
            torch._higher_order_ops.print("block norm {{:.4f}}", h.norm())  # BREAK
            return x + SCALE * h

    # named as the library's class, so that print(model) and pickles do not change
    _GbfixFixedBlock.__module__ = "pkg.layers"
    _GbfixFixedBlock.__name__ = _GbfixFixedBlock.__qualname__ = "Block"
    pkg.layers.Block = pkg.model.Block = _GbfixFixedBlock


model = torch.compile(Net())
print(model(torch.randn(2, 8)))  # CALL
'''.format(digest=source_digest(lib, lib.index("    def forward(self, x, mask=None):\n") + 1))


def _digest_of(path: Path, cls: str, method: str) -> str:
    """What the guard compares, from the running interpreter: the start of the sha256 of inspect.getsource."""
    spec = importlib.util.spec_from_file_location(f"_gbfix_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return hashlib.sha256(inspect.getsource(getattr(getattr(module, cls), method)).encode()).hexdigest()[:16]


def test_the_copy_keeps_the_librarys_text_one_level_deeper(tmp_path):
    """Lines of code gain the guard's indentation; the lines of a multi-line string stay as they are."""
    body = '''\
h = self.proj(
    x
)
note = """block
norm"""
print(note, h.norm())  # BREAK
return x + h'''
    out = patch(tmp_path, body=body).splitlines()
    lib = (tmp_path / "pkg" / "layers.py").read_text().splitlines()
    first = lib.index("    def forward(self, x, mask=None):")
    copied = out.index("        def forward(self, x, mask=None):")
    pairs = list(zip(lib[first : first + 8], out[copied : copied + 8]))  # the def and its 7 lines
    assert pairs[5] == ("        norm\"\"\"", "        norm\"\"\"")  # inside the string: unchanged
    assert all(mine == "    " + theirs for i, (theirs, mine) in enumerate(pairs) if i not in (5, 6))
    assert pairs[6][1] == '            gbfix_print("{!s} {!s}", note, h.norm())  # BREAK'


def test_the_digest_is_what_inspect_getsource_gives(tmp_path):
    """CRLF line ends, comments after the method and a string that ends at column 0; decorators."""
    text = 'class A:\r\n    def f(self):\r\n        s = """a\r\nb"""\r\n        return s\r\n\r\n    # after\r\n\r\nX = 1\r\n'
    path = tmp_path / "crlf.py"
    path.write_bytes(text.encode())
    lines = io.StringIO(text, newline=None).readlines()
    assert source_digest(lines, 2) == _digest_of(path, "A", "f")
    text = "def keep(f):\n    return f\n\n\nclass B:\n    @keep\n    @keep\n    def g(self):\n        return 2\n"
    path = tmp_path / "decorated.py"
    path.write_text(text)
    assert source_digest(text.splitlines(keepends=True), 6) == _digest_of(path, "B", "g")


def test_the_guard_is_off_for_other_code(tmp_path, monkeypatch):
    """The helper written into the user's file: on for the digest of the method, off otherwise."""
    (tmp_path / "guarded_lib.py").write_text("class A:\n    def f(self):\n        return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    scope: dict = {}
    exec(_GUARD_CODE, scope)
    unchanged = scope["_gbfix_unchanged"]
    digest = _digest_of(tmp_path / "guarded_lib.py", "A", "f")
    assert unchanged("guarded_lib", "A.f", digest)
    assert not unchanged("guarded_lib", "A.f", "0" * 16)
    assert not unchanged("guarded_lib", "A.g", digest)
    assert not unchanged("no_such_lib", "A.f", digest)


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (Path(importlib.util.find_spec("torch").submodule_search_locations[0]) / "nn" / "modules" / "linear.py", "return F.linear("),
        (Path(logging.__file__), "self._log(WARNING,"),
    ],
    ids=["torch", "stdlib"],
)
def test_the_innermost_library_method_above_torchs_and_the_stdlibs(tmp_path, path, text):
    """A frame of a method of torch (Linear.forward) or of the standard library (Logger.warning)
    below the library's method is not the one patched."""
    line = next(n for n, code in enumerate(path.read_text().splitlines(), 1) if text in code)
    out = patch(tmp_path, below=(Frame(str(path), line, 12, 40, "forward" if "torch" in str(path) else "warning"),))
    assert "class _GbfixFixedBlock(pkg.layers.Block):" in out and "Linear" not in out and "Logger" not in out


def test_an_unsafe_inner_recipe_makes_the_unsafe_patch(tmp_path):
    body = """\
        h = self.proj(x)
        torch._dynamo.graph_break()  # BREAK
        return x + h"""
    safe, unsafe = tmp_path / "safe", tmp_path / "unsafe"
    safe.mkdir(), unsafe.mkdir()
    assert patch(safe, body=body, code="GB0025", lib_span="torch._dynamo.graph_break()") is None
    out = patch(unsafe, body=body, code="GB0025", lib_span="torch._dynamo.graph_break()", recipe=LibraryPatchUnsafe)
    assert "graph_break" not in out and "pkg.layers.Block = pkg.model.Block = _GbfixFixedBlock" in out


@pytest.mark.parametrize(
    ("layers", "outer"),
    [
        (LAYERS, OUTER),  # Encoder(Block): bases are read at import
        (ALONE + "\n\nBLOCKS = [Block]\n", OUTER),
        (ALONE + "\n\nBLOCKS = dict(plain=Block)\n", OUTER),
        (ALONE, OUTER.replace("    def __init__", "    block_class = Block\n\n    def __init__")),
    ],
    ids=["subclass", "list", "dict-call", "class-attribute"],
)
def test_a_class_the_library_reads_at_import(tmp_path, layers, outer):
    assert patch(tmp_path, layers=layers, outer=outer) is None


@pytest.mark.parametrize(
    "script",
    [SCRIPT.replace("from pkg.model import Net\n", "from pkg.model import Net\n\npkg = None\n"), SCRIPT + "\n_GbfixFixedBlock = None\n"],
    ids=["package-name", "subclass-name"],
)
def test_names_the_script_binds_otherwise(tmp_path, script):
    assert patch(tmp_path, script) is None


def test_a_dict_of_classes(tmp_path):
    """transformers 4.x builds attention through ``X_ATTENTION_CLASSES[config._attn_implementation]``,
    a dict made at import: its entries holding the class are set too."""
    layers = ALONE + '\n\nBLOCKS = {{"plain": Block, "none": None}}\nOTHER = {{"plain": Block}}\n'  # braces doubled for str.format
    outer = OUTER.replace("from .layers import Block", "from .layers import BLOCKS").replace("= Block(", '= BLOCKS["plain"](')
    out = patch(tmp_path, layers=layers, outer=outer)
    assert '    pkg.layers.Block = pkg.layers.BLOCKS["plain"] = pkg.layers.OTHER["plain"] = _GbfixFixedBlock\n' in out


@pytest.mark.parametrize(
    ("outer", "binding"),
    [
        (OUTER.replace("import Block", "import Block as LayerBlock").replace("= Block(", "= LayerBlock("), "pkg.layers.Block = pkg.model.LayerBlock ="),
        (OUTER.replace("from .layers import Block", "from . import layers").replace("= Block(", "= layers.Block("), "pkg.layers.Block ="),
    ],
    ids=["alias", "module-attribute"],
)
def test_rebound_where_the_library_looks_it_up(tmp_path, outer, binding):
    """Each module on the stack that imports the class is rebound under its own name."""
    out = patch(tmp_path, outer=outer)
    assert f"    {binding} _GbfixFixedBlock\n" in out


def test_transformers_docstring_decorators(tmp_path):
    """transformers 4.x decorates forward with docstring setters imported from its utils (relative)."""
    layers = ALONE.replace("from .helpers import exists\n", "from .helpers import exists\nfrom ...utils import add_start_docstrings_to_model_forward\n")
    layers = layers.replace("SCALE = 0.5\n", 'SCALE = 0.5\nDOC = "x: the input"\n').replace(
        "    def forward(self, x, mask=None):", "    @add_start_docstrings_to_model_forward(DOC)\n    def forward(self, x, mask=None):"
    )
    script = SCRIPT.replace("from pkg.model import Net", "from transformers.models.tiny.model import Net")
    out = patch(tmp_path, script, layers=layers, package="transformers.models.tiny")
    assert (
        "    from transformers.models.tiny.layers import (\n"
        "        DOC,\n"
        "        SCALE,\n"
        "        add_start_docstrings_to_model_forward,\n"
        "        exists,\n"
        "    )\n"
    ) in out
    assert "        @add_start_docstrings_to_model_forward(DOC)\n        def forward(self, x, mask=None):\n" in out


def test_transformers_5_auto_docstring(tmp_path):
    """transformers 5 decorates forward with `@can_return_tuple` and `@auto_docstring` (which,
    on a method, sets __doc__ and returns the function): both kept on the copy."""
    layers = ALONE.replace(
        "from .helpers import exists\n", "from .helpers import exists\nfrom ...utils import auto_docstring, can_return_tuple\n"
    ).replace("    def forward(self, x, mask=None):", "    @can_return_tuple\n    @auto_docstring\n    def forward(self, x, mask=None):")
    script = SCRIPT.replace("from pkg.model import Net", "from transformers.models.tiny.model import Net")
    out = patch(tmp_path, script, layers=layers, package="transformers.models.tiny")
    assert "        @can_return_tuple\n        @auto_docstring\n        def forward(self, x, mask=None):\n" in out


def test_a_decorator_of_the_same_name_from_elsewhere(tmp_path):
    """The name alone is not enough: the package must be transformers."""
    layers = ALONE.replace("from .helpers import exists\n", "from .helpers import exists\nfrom .utils import add_start_docstrings_to_model_forward\n")
    layers = layers.replace("    def forward(self, x, mask=None):", "    @add_start_docstrings_to_model_forward\n    def forward(self, x, mask=None):")
    assert patch(tmp_path, layers=layers) is None


def test_engine_patches_a_class_the_library_builds(tmp_path):
    """tests/fixtures/library_patch, run as `python -m run`: tinylib (not a target) builds
    Mixer inside TinyModel; the script builds only TinyModel and prints it. The fixed
    program prints the same, has no break left, tinylib stays byte-identical; with
    Mixer.forward changed, the guard leaves the patch off and tinylib runs as it is."""
    shutil.copytree(FIXTURES / "library_patch", tmp_path, dirs_exist_ok=True)
    library = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "tinylib").rglob("*.py")}
    before = _run(tmp_path)
    script = (tmp_path / "run.py").resolve()
    entry = parse_entry("python -m run", tmp_path)
    result = engine.fix([script], entry, engine.Options())
    assert [o.edit.recipe for o in result.outcomes if o.status == "applied"] == ["library-patch"]
    assert result.remaining == 0 and set(result.fixed) == {script}
    script.write_bytes(result.fixed[script])
    assert "tinylib.blocks.Mixer = tinylib.model.Mixer = _GbfixFixedMixer" in script.read_text()
    assert {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "tinylib").rglob("*.py")} == library
    assert _run(tmp_path) == before
    again = engine.fix([script], entry, engine.Options())
    assert again.findings == () and again.fixed == {}

    blocks = tmp_path / "tinylib" / "blocks.py"
    blocks.write_text(blocks.read_text().replace("is deprecated;", "is deprecated (0.4);"))
    assert _run(tmp_path) == before.replace("is deprecated;", "is deprecated (0.4);")


def _run(folder: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "run"], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout


def test_engine_fixes_two_library_breaks_behind_one_call(tmp_path):
    """Two classes tinylib builds (Mixer and Gate) each break, both behind the script's one
    `compiled(...)` call: they are two sites, each fixed and judged on its own."""
    shutil.copytree(FIXTURES / "library_patch", tmp_path, dirs_exist_ok=True)
    blocks, model = tmp_path / "tinylib" / "blocks.py", tmp_path / "tinylib" / "model.py"
    blocks.write_text(blocks.read_text() + GATE)
    model.write_text(
        model.read_text()
        .replace("from .blocks import Mixer", "from .blocks import Gate, Mixer")
        .replace("self.head = nn.Linear(dim, 2)", "self.head = Gate(dim)")
    )
    before = _run(tmp_path)
    script = (tmp_path / "run.py").resolve()
    result = engine.fix([script], parse_entry("python -m run", tmp_path), engine.Options())
    assert sorted(o.edit.recipe for o in result.outcomes if o.status == "applied") == ["library-patch", "library-patch"]
    assert result.remaining == 0
    script.write_bytes(result.fixed[script])
    assert "_GbfixFixedMixer" in script.read_text() and "_GbfixFixedGate" in script.read_text()
    assert _run(tmp_path) == before


GATE = '''

class Gate(nn.Module):
    """The output head; its forward still announces that it is experimental."""

    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, 2)

    def forward(self, x):
        print("tinylib: Gate is experimental")
        return self.proj(x)
'''


def test_a_library_logger_call_goes_through_the_log_op(tmp_path):
    """logger-to-op asks for observed calls only where arguments need them: a literal
    message in a library method (transformers' deprecation notices) is fixed in the copy."""
    layers = LAYERS.replace("import warnings\n", "import logging\nimport warnings\n")
    layers = layers.replace("SCALE = 0.5\n", "SCALE = 0.5\nlogger = logging.getLogger(__name__)\n")
    body = """\
        if mask is not None:
            logger.warning("Block: `mask` is deprecated and ignored")  # BREAK
        return x + SCALE * self.proj(x)"""
    out = fix(tmp_path, body=body, code="GB0291", lib_span="logger.warning(", layers=layers)
    assert "from pkg.layers import SCALE, logger" in out
    assert 'gbfix_log(logger, "warning", "Block: `mask` is deprecated and ignored")  # BREAK' in out


def test_engine_patches_two_methods_of_one_class(tmp_path):
    """Mixer.forward and Mixer.stats (which forward calls) both break: the second site
    adds its method to the first patch's subclass, and the guard checks both methods."""
    shutil.copytree(FIXTURES / "library_patch", tmp_path, dirs_exist_ok=True)
    blocks = tmp_path / "tinylib" / "blocks.py"
    blocks.write_text(
        blocks.read_text()
        .replace("        return x + RESIDUAL_SCALE * h\n", "        return x + self.stats(h)\n")
        + STATS
    )
    library = blocks.read_bytes()
    before = _run(tmp_path)
    script = (tmp_path / "run.py").resolve()
    result = engine.fix([script], parse_entry("python -m run", tmp_path), engine.Options())
    assert [o.edit.recipe for o in result.outcomes if o.status == "applied"] == ["library-patch", "library-patch"]
    assert result.remaining == 0
    text = result.fixed[script].decode()
    assert text.count("class _GbfixFixedMixer(tinylib.blocks.Mixer):") == 1
    assert text.count("    def forward(self, x, mask=None):") == 1 and text.count("    def stats(self, h):") == 1
    guard = text.split("if (\n", 1)[1].split("):\n", 1)[0]  # one guard over both methods
    assert '_gbfix_unchanged("tinylib.blocks", "Mixer.forward", ' in guard
    assert '_gbfix_unchanged("tinylib.blocks", "Mixer.stats", ' in guard and "    and _gbfix_unchanged(" in guard
    script.write_bytes(result.fixed[script])
    assert _run(tmp_path) == before and blocks.read_bytes() == library


STATS = '''
    def stats(self, h):
        if self.verbose:
            print("tinylib: Mixer.stats is experimental")
        return RESIDUAL_SCALE * h
'''


# --- library-patch: a module-level function of the library ---------------------

OPS = """\
import torch

from .helpers import exists


def scale_of(h, mask=None):
    \"\"\"h, its non-finite values zeroed, masked.\"\"\"
    if not torch.isfinite(h).all():  # BREAK
        h = torch.nan_to_num(h, nan=0.0, posinf=0.0, neginf=0.0)
    if exists(mask):
        h = h * mask
    return h
"""

CALLER = ALONE.replace("from .helpers import exists\n", "from .helpers import exists\nfrom .ops import scale_of\n")


def patch_function(tmp_path: Path, ops: str = OPS) -> str | None:
    """Propose at the script's call: Net.forward -> Block.forward (its body calls
    pkg.ops.scale_of, line ``# CALLS``) -> scale_of, which breaks at ``# BREAK``."""
    body = "h = scale_of(self.proj(x), mask)  # CALLS\nreturn x + SCALE * h"
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "__init__.py").touch()
    (folder / "helpers.py").write_text("def exists(v):\n    return v is not None\n")
    layers = CALLER.format(body=textwrap.indent(body, "        "))
    paths = {name: (folder / f"{name}.py").resolve() for name in ("layers", "model", "ops")}
    for name, text in (("layers", layers), ("model", OUTER), ("ops", ops)):
        paths[name].write_text(text)
    user = (tmp_path / "run.py").resolve()
    user.write_text(SCRIPT)
    stack = (
        _frame(user, SCRIPT, "# CALL", "model(torch.randn(2, 8))", "<module>"),
        *MACHINERY,
        _frame(paths["model"], OUTER, "# OUTER", "self.block(x)", "forward"),
        *MACHINERY,
        _frame(paths["layers"], layers, "# CALLS", "scale_of(self.proj(x), mask)", "forward"),
        _frame(paths["ops"], ops, "# BREAK", "not torch.isfinite(h).all()", "scale_of"),
    )
    return _propose(user, stack, "GB0170", LibraryPatch)


def test_patch_a_function_of_the_library(tmp_path):
    """The function the break lies in is copied under a name of its own, fixed, and bound
    in its module and in the module on the stack that imports it; its class caller is not."""
    out = patch_function(tmp_path)
    digest = source_digest((tmp_path / "pkg" / "ops.py").read_text().splitlines(keepends=True), 6)
    assert out.split("\n\n\n", 2)[2] == f'''\
# gbfix: the graph breaks on pkg.ops.scale_of, and gbfix does not edit pkg: while that
# function is the code fixed here, pkg calls this copy instead.
if _gbfix_unchanged("pkg.ops", "scale_of", "{digest}"):
    import pkg.layers
    import pkg.ops
    from pkg.ops import exists

    def _gbfix_fixed_scale_of(h, mask=None):
        """h, its non-finite values zeroed, masked."""
        # BREAK
        h = torch.nan_to_num(h, nan=0.0, posinf=0.0, neginf=0.0)
        if exists(mask):
            h = h * mask
        return h

    # named as the library's function, so that its repr and pickles do not change
    _gbfix_fixed_scale_of.__module__ = "pkg.ops"
    _gbfix_fixed_scale_of.__name__ = _gbfix_fixed_scale_of.__qualname__ = "scale_of"
    pkg.ops.scale_of = pkg.layers.scale_of = _gbfix_fixed_scale_of


model = torch.compile(Net())
print(model(torch.randn(2, 8)))  # CALL
'''
    assert "_GbfixFixedBlock" not in out


def test_a_function_the_package_reexports_under_its_modules_name(tmp_path):
    """`from pkg.ops import ops` in the package makes `pkg.ops` the function: the package's
    binding is set too, and the module is reached through sys.modules."""
    out = _reexported(tmp_path, OPS.replace("def scale_of(", "def ops("))
    assert '    sys.modules["pkg.ops"].ops = pkg.ops = _gbfix_fixed_ops\n' in out
    assert "    import pkg.ops\n    import sys\n" in out


def _reexported(tmp_path: Path, ops: str) -> str | None:
    """Propose at a script that compiles the package's `pkg.ops` (the function) and calls it."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "__init__.py").write_text("from pkg.ops import ops\n")
    (folder / "helpers.py").write_text("def exists(v):\n    return v is not None\n")
    path = (folder / "ops.py").resolve()
    path.write_text(ops)
    script = "import torch\n\nimport pkg\n\nf = torch.compile(pkg.ops)\nprint(f(torch.randn(2, 8)))  # CALL\n"
    user = (tmp_path / "run.py").resolve()
    user.write_text(script)
    stack = (
        _frame(user, script, "# CALL", "f(torch.randn(2, 8))", "<module>"),
        _frame(path, ops, "# BREAK", "not torch.isfinite(h).all()", "ops"),
    )
    return _propose(user, stack, "GB0170", LibraryPatch)


@pytest.mark.parametrize(
    "ops",
    [
        OPS.replace("    return h\n", "    return scale_of(h) if h.dim() > 3 else h\n"),  # calls itself by its global
        OPS.replace("def scale_of(", "@HOOKS.append\ndef scale_of(").replace("from .helpers import exists\n", "from .helpers import exists\n\nHOOKS = []\n"),
        OPS.replace('    """h, its', '    global SEEN\n    """h, its'),
    ],
    ids=["recursive", "registry-decorator", "global"],
)
def test_functions_that_mean_something_else_as_a_copy(tmp_path, ops):
    """Declined for the function; the method above it (Block.forward) has no break a recipe
    fixes at its call of the function, so nothing is proposed."""
    assert patch_function(tmp_path, ops) is None


def test_library_class_leaves_a_function_to_the_patch(tmp_path):
    """library-class constructs a subclass: a module-level function below the user's call is not its."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helpers.py").write_text("def exists(v):\n    return v is not None\n")
    path = (tmp_path / "pkg" / "ops.py").resolve()
    path.write_text(OPS)
    model = "import torch\n\nfrom pkg.ops import scale_of\n\n\ndef step(x):\n    return scale_of(x)  # CALL\n"
    user = (tmp_path / "model.py").resolve()
    user.write_text(model)
    stack = (_frame(user, model, "# CALL", "scale_of(x)", "step"), _frame(path, OPS, "# BREAK", "not torch.isfinite(h).all()", "scale_of"))
    assert _propose(user, stack, "GB0170", LibraryClass) is None


def test_engine_patches_a_function_of_the_library(tmp_path):
    """tinylib's Mixer.forward calls tinylib.scale.scale (re-exported by the package as
    `tinylib.scale`), which tests `if not torch.isfinite(h).all()`: the fixed copy is bound in
    tinylib.scale (through sys.modules), tinylib.blocks and the package; no break is left, the
    output is the same, tinylib stays byte-identical, and with scale changed the guard is off."""
    shutil.copytree(FIXTURES / "library_patch", tmp_path, dirs_exist_ok=True)
    lib = tmp_path / "tinylib"
    (lib / "scale.py").write_text(
        "import torch\n\n\ndef scale(x, h, factor):\n"
        "    if not torch.isfinite(h).all():\n        h = torch.nan_to_num(h)\n    return x + factor * h\n"
    )
    blocks = lib / "blocks.py"
    blocks.write_text(
        blocks.read_text()
        .replace("from .utils import exists\n", "from .scale import scale\nfrom .utils import exists\n")
        .replace("        return x + RESIDUAL_SCALE * h\n", "        return scale(x, h, RESIDUAL_SCALE)\n")
        .replace('        if self.verbose:\n            print("tinylib: Mixer(verbose=True) is deprecated; use TinyModel.stats()")\n', "")
    )
    (lib / "__init__.py").write_text((lib / "__init__.py").read_text() + "from tinylib.scale import scale\n")
    library = {p.relative_to(tmp_path): p.read_bytes() for p in lib.rglob("*.py")}
    before = _run(tmp_path)
    script = (tmp_path / "run.py").resolve()
    result = engine.fix([script], parse_entry("python -m run", tmp_path), engine.Options())
    assert [o.edit.recipe for o in result.outcomes if o.status == "applied"] == ["library-patch"]
    assert result.remaining == 0 and set(result.fixed) == {script}
    script.write_bytes(result.fixed[script])
    assert 'sys.modules["tinylib.scale"].scale = tinylib.blocks.scale = tinylib.scale = _gbfix_fixed_scale' in script.read_text()
    assert {p.relative_to(tmp_path): p.read_bytes() for p in lib.rglob("*.py")} == library
    assert _run(tmp_path) == before
    (lib / "scale.py").write_text((lib / "scale.py").read_text().replace("return x + factor * h", "return x + 2 * factor * h"))
    assert _run(tmp_path) != before  # the guard is off: tinylib's own (changed) function runs


def test_a_helper_name_the_script_binds_otherwise(tmp_path):
    """The inner recipe runs on the library's file, where gbfix_print is free; the helper goes
    to the script, which binds the name to something else: declined."""
    body = 'note = "block"\nprint(note, self.proj(x).norm())  # BREAK\nreturn x'
    script = SCRIPT.replace("from pkg.model import Net\n", "from pkg.model import Net\n\ngbfix_print = None\n")
    assert patch(tmp_path, script, body=body) is None
    (tmp_path / "again").mkdir()
    assert "gbfix_print(" in patch(tmp_path / "again", body=body)


def test_helpers_an_earlier_round_wrote_into_the_script_are_gbfix_s_own(tmp_path):
    """A second library method patched in a later round (DDIM's step after _get_variance)
    needs the helpers the first patch wrote into the script, one of them bound by an
    assignment (`_gbfix_take_op = ...`): gbfix's own code, not a clash."""
    layers = ALONE.replace(
        "self.proj = nn.Linear(dim, dim)",
        "self.proj = nn.Linear(dim, dim)\n        self.table = torch.linspace(1, 0, 10)\n        self.one = torch.tensor(1.0)",
    )
    body = "t = x.sum().long() - 1\nv = self.table[t] if t >= 0 else self.one  # BREAK\nreturn x * v"
    pieces = generated.closure(["gbfix_index_or"])
    assert "_gbfix_take_op" in [p.name for p in pieces]
    written = SCRIPT.replace("from pkg.model import Net\n", "from pkg.model import Net\n\n\n" + "\n\n".join(p.code for p in pieces) + "\n")
    out = patch(tmp_path, written, body=body, layers=layers, code="GB0170", lib_span="t >= 0")
    assert out is not None and "gbfix_index_or(" in out.split("class _GbfixFixedBlock")[1]
    # the same name bound by the user's own code is still a clash
    mine = SCRIPT.replace("from pkg.model import Net\n", "from pkg.model import Net\n\n_gbfix_take_op = None\n")
    assert patch(tmp_path / "mine", mine, body=body, layers=layers, code="GB0170", lib_span="t >= 0") is None


def test_the_inner_recipe_sees_the_librarys_class(tmp_path):
    """`self.buf` is a tensor because the library's __init__ says so: the inner recipe
    (item-to-tensor) runs on the library's file, where it sees that; a copy alone does not."""
    layers = ALONE.replace("self.proj = nn.Linear(dim, dim)", "self.proj = nn.Linear(dim, dim)\n        self.buf = torch.ones(dim)")
    body = "return self.buf * x.sum().item()  # BREAK"
    out = patch(tmp_path, body=body, layers=layers, code="GB0124", lib_span="x.sum().item()")
    assert "            return self.buf * x.sum().detach()  # BREAK\n" in out


CHUNKED = '''\
import numpy as np
import torch
from torch import nn


class Config:
    lsh_chunk = 4
    local_chunk = 6


def _chunk_len(config):
    return np.lcm(config.lsh_chunk, config.local_chunk)


class Mixer(nn.Module):
    def __init__(self, dim, verbose=False):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.config = Config()

    def forward(self, x, mask=None):
        n = _chunk_len(self.config)
        if x.shape[-1] % n != 0:
            x = torch.nn.functional.pad(x, (0, n - x.shape[-1] % n))[..., : x.shape[-1]]
        return x + torch.tanh(self.proj(x))
'''


def test_engine_patches_the_function_a_method_calls(tmp_path):
    """Mixer.forward tests `x.shape[-1] % n` with n from a module-level helper's np.lcm (a
    tensor under Dynamo, as in Reformer): the inner recipe's fix lies in the helper, so the
    helper is patched (bound in tinylib.blocks, where forward looks it up), not the method."""
    shutil.copytree(FIXTURES / "library_patch", tmp_path, dirs_exist_ok=True)
    (tmp_path / "tinylib" / "blocks.py").write_text(CHUNKED)
    library = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "tinylib").rglob("*.py")}
    before = _run(tmp_path)
    script = (tmp_path / "run.py").resolve()
    result = engine.fix([script], parse_entry("python -m run", tmp_path), engine.Options())
    assert [o.edit.recipe for o in result.outcomes if o.status == "applied"] == ["library-patch"]
    assert result.remaining == 0
    text = result.fixed[script].decode()
    assert "    tinylib.blocks._chunk_len = _gbfix_fixed__chunk_len\n" in text and "_GbfixFixedMixer" not in text
    assert "if torch.compiler.is_compiling()" in text
    script.write_bytes(result.fixed[script])
    assert _run(tmp_path) == before
    assert {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "tinylib").rglob("*.py")} == library


def test_a_function_the_method_calls_is_patched_when_the_method_cannot_be(tmp_path):
    """Block.forward is under a decorator of the library's own (it cannot be copied), but the
    fix lies in _chunk_len, the module-level function it calls: that one is patched."""
    layers = ALONE.replace("import warnings\n", "import warnings\n\nimport numpy as np\n").replace(
        "SCALE = 0.5\n",
        "SCALE = 0.5\n\n\ndef keep(fn):\n    return fn\n\n\nclass Config:\n    lsh_chunk = 4\n    local_chunk = 6\n\n\n"
        "def _chunk_len(config):\n    return np.lcm(config.lsh_chunk, config.local_chunk)\n",
    ).replace("    def forward(self, x, mask=None):", "    @keep\n    def forward(self, x, mask=None):")
    body = "n = _chunk_len(Config())\nif x.shape[-1] % n != 0:  # BREAK\n    x = x[..., :n]\nreturn x"
    out = patch(tmp_path, body=body, layers=layers, code="GB0170", lib_span="x.shape[-1] % n != 0")
    assert "    pkg.layers._chunk_len = _gbfix_fixed__chunk_len\n" in out and "_GbfixFixedBlock" not in out
