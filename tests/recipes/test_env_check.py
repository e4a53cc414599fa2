"""Static tests of env-check-constant (no torch): a cached environment probe made a graph constant."""

from __future__ import annotations

import pytest

from gbfix.recipes.env_check import EnvCheckConstant
from tests.helpers import rewrite_line

PROBE = '''\
import functools
import shutil
{imports}

{decorator}
def probe({params}):
    {body}


def forward(x):
    if probe({args}):
        return x
    return x + 1
'''


def _probe(body: str = 'return shutil.which("nvcc") is not None', decorator: str = "@functools.lru_cache", imports: str = "import torch", params: str = "", args: str = "", code: str = "GB0007") -> str | None:
    source = PROBE.format(imports=imports, decorator=decorator, body=body, params=params, args=args)
    return rewrite_line(source, EnvCheckConstant, body.splitlines()[-1].strip(), code)


def _decorators(out: str) -> list[str]:
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("def probe("))
    return [line for line in lines[:at] if line.startswith("@")]


@pytest.mark.parametrize(
    "decorator, imports",
    [
        ("@functools.lru_cache", "import torch"),
        ("@functools.lru_cache(maxsize=None)", "import torch"),
        ("@cache", "import torch\nfrom functools import cache"),
        ("@ft.lru_cache(None)", "import torch\nimport functools as ft"),
    ],
)
def test_marks_the_cached_function_under_its_cache(decorator, imports):
    out = _probe(decorator=decorator, imports=imports)
    assert _decorators(out) == [decorator, "@torch._dynamo.assume_constant_result"]


@pytest.mark.parametrize(
    "body, params, args, code",
    [
        ('return os.path.exists("/opt/flash")', "", "", "GB0007"),
        ("return importlib.import_module(name) is not None", "name", '"flash_attn"', "GB0007"),
        ("with open(path) as fh:\n        return json.load(fh)", "path", '"cfg.json"', "GB0059"),
        ('with open(path, "rb") as fh:\n        return fh.read(4) == b"GGUF"', "path", '"w.bin"', "GB0059"),
    ],
)
def test_probes_that_look_without_touching(body, params, args, code):
    out = _probe(body=body, params=params, args=args, code=code)
    assert out is not None and "@torch._dynamo.assume_constant_result\ndef probe(" in out


@pytest.mark.parametrize(
    "body",
    [
        'print("probing")\n    return shutil.which("nvcc") is not None',
        'logger.warning("probing")\n    return shutil.which("nvcc") is not None',
        'warnings.warn("probing")\n    return shutil.which("nvcc") is not None',
        'global FOUND\n    FOUND = shutil.which("nvcc")\n    return FOUND',
        'STATE["nvcc"] = shutil.which("nvcc")\n    return STATE["nvcc"]',
        'with open("probe.log", "a") as fh:\n        return shutil.which("nvcc")',
        'os.remove("lock")\n    return shutil.which("nvcc")',
    ],
)
def test_declines_a_probe_with_effects(body):
    assert _probe(body=body) is None


def test_declines_what_is_not_a_cached_module_level_probe():
    assert _probe(decorator="@functools.wraps(shutil.which)") is None  # not cached: may change per call
    assert _probe(decorator="@functools.lru_cache\n@torch._dynamo.assume_constant_result") is None  # marked already
    source = PROBE.format(imports="import torch", decorator="@functools.lru_cache", body="return shutil.which('x')", params="", args="")
    method = source.replace("@functools.lru_cache\ndef probe():\n    return", "class C:\n    @functools.lru_cache\n    def probe(self):\n        return")
    assert rewrite_line(method, EnvCheckConstant, "return shutil.which", "GB0007") is None


def test_declines_a_module_without_torch():
    # no new `import torch` goes into a module that does not import torch itself
    assert _probe(imports="") is None
    assert _probe(imports="from torch import nn") is None


def test_declines_when_the_module_clears_a_cache():
    source = PROBE.format(imports="import torch", decorator="@functools.lru_cache", body='return shutil.which("nvcc") is not None', params="", args="")
    assert rewrite_line(source + "\nprobe.cache_clear()\n", EnvCheckConstant, "return shutil.which", "GB0007") is None


def test_rule_example():
    from pathlib import Path

    from gbfix.rules import parse

    rules = Path(__file__).resolve().parents[2] / "rules" / "GB0007.md"
    example = next(e for e in parse(rules) if e.title.startswith("a cached toolchain probe"))
    assert rewrite_line(example.before, EnvCheckConstant, 'return shutil.which("nvcc")', "GB0007") == example.after


def test_declines_a_cached_tensor_and_takes_torch_queries():
    assert _probe(body="return torch.arange(n).float()", params="n", args="4") is None
    out = _probe(body='return torch.cuda.is_available() and shutil.which("nvcc") is not None')
    assert out is not None and "@torch._dynamo.assume_constant_result\ndef probe(" in out


def test_a_torch_query_gb0208_rule_example():
    from pathlib import Path

    from gbfix.rules import parse

    rules = Path(__file__).resolve().parents[2] / "rules" / "GB0208.md"
    example = next(e for e in parse(rules) if e.title.startswith("a thread count"))
    assert rewrite_line(example.before, EnvCheckConstant, "return torch.get_num_threads()", "GB0208") == example.after
