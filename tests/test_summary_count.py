"""The summary counts one thing, break sites: a site Dynamo reports once per frame it breaks in
(a helper called from two compiled functions) is one site, before the edits and after them."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_gbfix

PROGRAM = '''\
import torch


def check_finite(x):
    if torch.isnan(x).any():
        raise ValueError("NaN in %.1f" % x.sum())
    return x


@torch.compile(backend="eager")
def first(x):
    print("first")
    return check_finite(x) + 1


@torch.compile(backend="eager")
def second(x):
    return check_finite(x) * 2


x = torch.ones(3)
print(first(x).sum().item(), second(x).sum().item())
'''


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    root = tmp_path_factory.mktemp("twice")
    (root / "run.py").write_text(PROGRAM)
    return run_gbfix("--apply", "--output-format", "json", "--entry", "run.py", "run.py", cwd=root)


def test_a_site_reported_twice_counts_once_after_the_edits(applied):
    # The print is fixed; the branch in check_finite stays (its message converts a tensor with
    # float(), `%.1f`, which raise-if declines: the only fix is branch-to-check, unsafe) and Dynamo
    # reports it twice, once from each compiled function: one site still breaks, not two.
    summary = "Found 2 graph break sites: 1 fixed, 1 fixable with --unsafe-fixes. 1 site still breaks after the edits."
    assert applied.returncode == 1, applied.stderr
    assert applied.stderr.splitlines()[-1] == summary
    data = json.loads(applied.stdout)
    assert data["summary"]["text"] == summary
    assert data["remaining"] == 1
    assert data["counts"] == {"fixed": 1, "fixable-unsafe": 1, "unfixed": 0, "outside": 0, "suppressed": 0, "recompile": 0}
