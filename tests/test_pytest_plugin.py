"""pytest --gbfix, run by pytester on a tiny suite with compiled functions that graph-break.

Two runs import torch: one without xdist (the report per test, the eager backend
forced, the baseline written), one with `-n 2` (the workers' records merged into one
report, the tests' own backend kept, a baseline that misses a break fails the session).
Two more runs check that the plugin is inert without its flags. Both torch runs also
check what is left out, as `gbfix check` leaves it out: `quiet` breaks twice, on a print
with a `# gbfix: ignore[GB0059]` comment (counted as suppressed) and on an `.item()` that
`ignore = ["GB0124"]` of the suite's [tool.gbfix] leaves out (its baseline entry is kept).
"""

from __future__ import annotations

import json
import textwrap

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.xdist_group("test_pytest_plugin")

OPS = textwrap.dedent(
    """\
    import torch

    CALLS = []


    def counting(gm, example_inputs):  # a backend that counts its compilations
        CALLS.append(1)
        return gm.forward


    @torch.compile(backend=counting)
    def noisy(x):
        print("noisy")
        return x + 1


    class Net(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x


    @torch.compile(backend=counting)
    def at_import(x):
        torch._dynamo.graph_break()
        return x


    @torch.compile(backend=counting)
    def quiet(x):
        print("quiet")  # gbfix: ignore[GB0059]
        return x + x.sum().item()
    """
)

TEST_A = textwrap.dedent(
    """\
    from pathlib import Path

    import torch

    from pkg.ops import CALLS, Net, counting, noisy


    def test_noisy():
        assert noisy(torch.ones(2)).tolist() == [2.0, 2.0]


    def test_net():
        net = torch.compile(Net(), backend=counting)
        assert net(torch.ones(2)).tolist() == [2.0, 2.0]


    def test_backend_calls():
        noisy(torch.ones(2))
        Path("backend_calls.txt").write_text(str(len(CALLS)))
    """
)

TEST_B = textwrap.dedent(
    """\
    import torch

    from pkg.ops import at_import, noisy, quiet

    at_import(torch.ones(1))  # compiled while the module is collected


    def test_noisy_too():
        assert noisy(torch.ones(2)).tolist() == [2.0, 2.0]


    def test_plain():
        assert quiet(torch.ones(2)).tolist() == [3.0, 3.0]
    """
)


def _entry(code: str, function: str) -> dict:
    return {"code": code, "path": "pkg/ops.py", "function": function, "count": 1}


PARTIAL = {"version": 1, "breaks": [_entry("GB0059", "noisy"), _entry("GB0025", "at_import"), _entry("GB0124", "quiet")]}
MISSING = "gbfix: 1 graph break not in the baseline partial.json: GB0170 in pkg/ops.py (Net.forward); the session fails."


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite may itself run in a worker
    pytester.makepyfile(**{"pkg/__init__.py": "", "pkg/ops.py": OPS, "tests/test_a.py": TEST_A, "tests/test_b.py": TEST_B})
    (pytester.path / "partial.json").write_text(json.dumps(PARTIAL))
    (pytester.path / "pyproject.toml").write_text('[tool.gbfix]\nignore = ["GB0124"]\n')
    return pytester


def _run(pytester, *args: str):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=240)


def _section(result) -> list[str]:
    """The lines of the gbfix section of the terminal summary."""
    lines = result.outlines
    start = next(i for i, ln in enumerate(lines) if "gbfix: graph breaks" in ln)
    return lines[start + 1 : start + 1 + next(i for i, ln in enumerate(lines[start + 1 :]) if ln.startswith(("gbfix: ", "=")))]


def test_breaks_per_test_written_to_a_baseline(suite):
    result = _run(suite, "--gbfix", "--gbfix-baseline", "full.json", "--gbfix-update-baseline")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=5)
    assert _section(result) == [
        "(collection)",
        "    pkg/ops.py:26:5: GB0025 Call to `torch._dynamo.graph_break()` (in at_import)",
        "tests/test_a.py::test_net",
        "    pkg/ops.py:19:12: GB0170 Data-dependent branching (in Net.forward)",
        "tests/test_a.py::test_noisy",
        "    pkg/ops.py:13:5: GB0059 Failed to trace builtin operator (in noisy)",
    ]
    result.stdout.fnmatch_lines(
        ["gbfix: 3 graph breaks in 2 tests, 3 sites in the project (eager backend). 1 suppressed.", "gbfix: wrote full.json: 3 graph breaks in 3 entries."]
    )
    assert json.loads((suite.path / "full.json").read_text())["breaks"] == [
        _entry("GB0170", "Net.forward"), _entry("GB0025", "at_import"), _entry("GB0059", "noisy"),
    ]
    assert (suite.path / "backend_calls.txt").read_text() == "0"  # the eager backend, not the tests' own


def test_xdist_workers_merged_into_one_report_that_fails_on_a_new_break(suite):
    result = _run(suite, "-n", "2", "--gbfix-backend", "own", "--gbfix-baseline", "partial.json")
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=5)
    out = result.stdout.str()
    assert out.count("gbfix: graph breaks") == 1, out  # the controller reports, the workers do not
    section = _section(result)
    for test, code in (("tests/test_a.py::test_net", "GB0170"), ("tests/test_a.py::test_noisy", "GB0059"), ("(collection)", "GB0025")):
        assert test in section and code in section[section.index(test) + 1], section
    # both workers compile at_import (and noisy, when its tests are split): a site counts once
    result.stdout.fnmatch_lines(["gbfix: * graph breaks in * tests, 3 sites in the project (own backend, 2 workers). 1 suppressed.", MISSING])
    assert "that is gone" not in out  # the GB0124 entry of `quiet`: its code is ignored, so it is not stale
    assert int((suite.path / "backend_calls.txt").read_text()) > 0  # the tests' own backend compiled


def test_inert_without_its_flags(pytester):
    pytester.makepyfile(
        test_inert=textwrap.dedent(
            """\
            import sys


            def test_nothing_imported_or_patched(pytestconfig):
                assert pytestconfig.pluginmanager.hasplugin("gbfix")  # the entry point is registered
                assert not pytestconfig.pluginmanager.hasplugin("gbfix-session")
                assert "torch" not in sys.modules
                assert sorted(m for m in sys.modules if m.startswith("gbfix")) == ["gbfix", "gbfix.pytest_plugin"]
            """
        )
    )
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()
    assert "gbfix:" not in result.stdout.str()
    result = _run(pytester, "--gbfix-update-baseline")
    assert result.ret == 4
    assert "--gbfix-update-baseline needs --gbfix-baseline FILE" in result.stderr.str()
