"""numpy-to-math-under-compile / numpy-to-math: numpy math on Python numbers that a
Python test reads, found inline, in a local or in a helper's return, and the cases
each declines; one real compile checks the guarded form leaves no break."""

from __future__ import annotations

import textwrap

import pytest

from gbfix import recipes
from gbfix.recipes.numpy_scalar import NumpyToMath, NumpyToMathUnderCompile
from tests.helpers import changed, rewrite_line

HELPER = """\
import numpy as np
import torch


def _chunk_len(config):
    if config.single:
        return config.chunk
    return np.lcm(config.lsh_chunk, config.local_chunk)


class Model(torch.nn.Module):
    def forward(self, x, past=None):
        shape = x.size()
        n = _chunk_len(self.config)
        must_pad = (
            shape[-1] % n != 0
            and past is None
        )
        if must_pad:
            x = x + 1
        return x
"""
GUARDED_LCM = [
    "import math",
    "return (",
    "math.lcm(config.lsh_chunk, config.local_chunk)",
    "if torch.compiler.is_compiling()",
    "else np.lcm(config.lsh_chunk, config.local_chunk)",
    ")",
]


@pytest.mark.parametrize("needle", ["shape[-1] % n != 0", "if must_pad:"])
def test_helper_return_followed_from_the_test_and_from_a_flag(needle):
    # the test itself, and the `if` on the flag it is stored in: the same edit
    out = rewrite_line(HELPER, NumpyToMathUnderCompile, needle, "GB0170")
    assert changed(HELPER, out) == GUARDED_LCM


def test_unsafe_form_in_place():
    out = rewrite_line(HELPER, NumpyToMath, "if must_pad:", "GB0170")
    assert changed(HELPER, out) == ["import math", "return math.lcm(config.lsh_chunk, config.local_chunk)"]


def module(body: str, imports: str = "import numpy as np\nimport torch") -> str:
    return f"{imports}\n\n\nclass M(torch.nn.Module):\n{textwrap.indent(textwrap.dedent(body), '    ')}"


@pytest.mark.parametrize(
    "body, needle, code, after",
    [
        # inline in the test, np.gcd of a shape entry and a literal
        (
            """
            def forward(self, x):
                if x.shape[-1] % np.gcd(x.shape[0], 6) == 0:
                    return x + 1
                return x
            """,
            "if x.shape", "GB0170",
            "if x.shape[-1] % (math.gcd(x.shape[0], 6) if torch.compiler.is_compiling() else np.gcd(x.shape[0], 6)) == 0:",
        ),
        # a local of the same function, np.sqrt of a len (non-negative)
        (
            """
            def forward(self, x, items):
                scale = np.sqrt(len(items))
                if scale > 2:
                    x = x / scale
                return x
            """,
            "if scale > 2:", "GB0170",
            # too long for one line: one part a line
            ["scale = (", "math.sqrt(len(items))", "if torch.compiler.is_compiling()", "else np.sqrt(len(items))", ")"],
        ),
        # a method's return; self.block set only to numbers in this file
        (
            """
            def __init__(self, config):
                super().__init__()
                self.block = config.block_size * 2

            def _span(self):
                return np.maximum(self.block, 8)

            def forward(self, x):
                if x.shape[1] > self._span():
                    x = x[:, : self._span()]
                return x
            """,
            "if x.shape[1]", "GB0170",
            None,  # self.block is a config attribute: a number, not shown an int -> unsafe only
        ),
        # int() of the value: GB0208 at the use
        (
            """
            def forward(self, x):
                n = int(np.prod([x.shape[0], 4]))
                return x.reshape(n, -1)
            """,
            "return x.reshape", "GB0208",
            "n = int((math.prod([x.shape[0], 4]) if torch.compiler.is_compiling() else np.prod([x.shape[0], 4])))",
        ),
        # range() of it: GB0059
        (
            """
            def forward(self, x):
                for i in range(np.lcm(2, 3)):
                    x = x + i
                return x
            """,
            "for i in range", "GB0059",
            "for i in range((math.lcm(2, 3) if torch.compiler.is_compiling() else np.lcm(2, 3))):",
        ),
    ],
)
def test_spellings(body, needle, code, after):
    src = module(body)
    out = rewrite_line(src, NumpyToMathUnderCompile, needle, code)
    if after is None:
        assert out is None
        assert rewrite_line(src, NumpyToMath, needle, code) is not None
    else:
        assert changed(src, out) == ["import math", *([after] if isinstance(after, str) else after)]


def test_unsafe_takes_what_math_may_round_or_raise_on():
    src = module(
        """
        def forward(self, x):
            scale = np.log(self.config.base) + np.floor(self.config.ratio)
            if scale > 1:
                x = x * 2
            return x
        """
    )
    assert rewrite_line(src, NumpyToMathUnderCompile, "if scale", "GB0170") is None  # two numpy values
    single = src.replace(" + np.floor(self.config.ratio)", "")
    assert rewrite_line(single, NumpyToMathUnderCompile, "if scale", "GB0170") is None
    assert changed(single, rewrite_line(single, NumpyToMath, "if scale", "GB0170")) == [
        "import math", "scale = math.log(self.config.base)"
    ]
    floor = src.replace("np.log(self.config.base) + ", "")
    assert changed(floor, rewrite_line(floor, NumpyToMath, "if scale", "GB0170")) == [
        "import math", "scale = float(math.floor(self.config.ratio))"
    ]


def test_math_already_imported_is_not_added_again():
    src = HELPER.replace("import numpy as np\n", "import math\n\nimport numpy as np\n")
    out = rewrite_line(src, NumpyToMath, "if must_pad:", "GB0170")
    assert out.count("import math") == 1


@pytest.mark.parametrize(
    "body, needle",
    [
        # a tensor argument
        ("def forward(self, x):\n    if np.sqrt(x.sum()) > 2:\n        return x\n    return -x\n", "if np.sqrt"),
        # an ndarray argument
        (
            "def forward(self, x):\n    a = np.arange(4)\n    if np.maximum(a, 2).sum() > 2:\n        return x\n    return -x\n",
            "if np.maximum",
        ),
        # the result used as an array
        (
            "def forward(self, x):\n    r = np.sqrt(4.0)\n    if r.astype(int) > 1:\n        return x\n    return -x\n",
            "if r.astype",
        ),
        # a parameter without an int/float annotation may be a tensor
        ("def forward(self, x, n):\n    if np.gcd(n, 4) > 1:\n        return x\n    return -x\n", "if np.gcd"),
        # a self attribute this file makes a buffer
        (
            (
                "def __init__(self):\n    super().__init__()\n    self.register_buffer('scale', torch.ones(()))\n\n"
                "def forward(self, x):\n    if np.sqrt(self.scale) > 1:\n        return x\n    return -x\n"
            ),
            "if np.sqrt",
        ),
        # keyword arguments
        ("def forward(self, x):\n    if np.lcm(4, 6, dtype=np.int32) > 1:\n        return x\n    return -x\n", "if np.lcm"),
        # no numpy on the way to the test
        ("def forward(self, x):\n    if x.sum() > 0:\n        return x\n    return -x\n", "if x.sum"),
    ],
)
def test_declines(body, needle):
    src = module(body)
    assert rewrite_line(src, NumpyToMathUnderCompile, needle, "GB0170") is None
    assert rewrite_line(src, NumpyToMath, needle, "GB0170") is None


def test_declines_where_math_means_something_else():
    src = HELPER.replace("import torch\n", "import torch\nfrom mylib import math\n")
    assert rewrite_line(src, NumpyToMath, "if must_pad:", "GB0170") is None


def test_registered_before_branch_safe_first():
    names = [r.name for r in recipes.candidates("GB0170", unsafe=True)]
    assert names.index("numpy-to-math-under-compile") < names.index("numpy-to-math")
    assert "numpy-to-math" not in [r.name for r in recipes.candidates("GB0170", unsafe=False)]


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory):
    """The rewritten helper example compiled with a counting backend, and run eagerly."""
    import runpy

    import torch

    script = tmp_path_factory.mktemp("numpy_scalar") / "model.py"
    script.write_text(rewrite_line(HELPER, NumpyToMathUnderCompile, "if must_pad:", "GB0170"))
    space = runpy.run_path(str(script))
    model = space["Model"]()
    model.config = type("Cfg", (), {"single": False, "chunk": 4, "lsh_chunk": 4, "local_chunk": 6})()
    graphs = []

    def backend(gm, _):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    x = torch.ones(2, 10)
    got = torch.compile(model, backend=backend)(x)
    return graphs, got, model(x), space["_chunk_len"](model.config)


def test_guarded_form_compiles_to_one_graph_and_keeps_numpy_in_eager(compiled_run):
    import numpy as np
    import torch

    graphs, got, eager, value = compiled_run
    assert len(graphs) == 1
    assert torch.equal(got, eager) and torch.equal(eager, torch.full((2, 10), 2.0))
    assert type(value) is np.int64 and value == 12  # eager still runs numpy
