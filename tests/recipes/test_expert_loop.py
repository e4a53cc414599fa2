"""visit-all-experts, applied statically at the sites Dynamo 2.13 reports: the
`.nonzero()` before the loop (GB0036) and the `.tolist()` in its header (GB0033)."""

from __future__ import annotations

import textwrap

import pytest

from gbfix.recipes.expert_loop import VisitAllExperts
from tests.helpers import rewrite_at

MOE = """
import torch


def dispatch(hidden, expert_mask, experts, weights):
    final = torch.zeros_like(hidden)
    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit.squeeze(-1).tolist():
        idx, top_x = torch.where(expert_mask[expert_idx])
        final.index_add_(0, top_x, experts[expert_idx](hidden[top_x]) * weights[top_x, idx, None])
    return final
"""

LOOP = """\
    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit.squeeze(-1).tolist():
"""
AFTER = """\
    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0)
    for expert_idx in range(expert_hit.shape[0]):
"""


def at(source: str, needle: str, code: str) -> str | None:
    source = textwrap.dedent(source)
    for number, line in enumerate(source.splitlines(), 1):
        col = line.find(needle)
        if col >= 0:
            return rewrite_at(source, VisitAllExperts, number, col, col + len(needle), code)
    raise AssertionError(f"{needle!r} not in source")


@pytest.mark.parametrize(
    "needle, code",
    [("torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()", "GB0036"), ("expert_hit.squeeze(-1).tolist()", "GB0033")],
)
def test_both_sites_give_the_same_edit(needle, code):
    assert at(MOE, needle, code) == textwrap.dedent(MOE).replace(LOOP, AFTER)


@pytest.mark.parametrize(
    "old, new",
    [
        ("expert_hit.squeeze(-1).tolist()", "expert_hit.flatten().tolist()"),
        ("expert_hit.squeeze(-1).tolist()", "expert_hit.view(-1).tolist()"),
    ],
)
def test_reshapes_of_the_indices(old, new):
    out = at(MOE.replace(old, new), "torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()", "GB0036")
    assert "for expert_idx in range(expert_hit.shape[0]):\n" in out


def test_fused_header():
    source = MOE.replace(
        "    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()\n"
        "    for expert_idx in expert_hit.squeeze(-1).tolist():\n",
        "    for expert_idx in expert_mask.sum(dim=(-1, -2)).nonzero().squeeze(-1).tolist():\n",
    )
    out = at(source, "expert_mask.sum(dim=(-1, -2)).nonzero()", "GB0036")
    assert "    for expert_idx in range(expert_mask.sum(dim=(-1, -2)).shape[0]):\n" in out


@pytest.mark.parametrize(
    "old, new",
    [
        ("    return final", "    print(expert_hit)\n    return final"),  # the indices are read again
        ("expert_hit.squeeze(-1).tolist()", "expert_hit.squeeze(-1).tolist()[:2]"),  # not the whole list
        ("expert_hit.squeeze(-1).tolist()", "expert_hit.squeeze(0).tolist()"),  # another shape
        (".nonzero()", ".nonzero(as_tuple=False)"),  # arguments
    ],
)
def test_declines(old, new):
    source = MOE.replace(old, new)
    assert source != MOE
    assert at(source, "torch.greater(expert_mask.sum(dim=(-1, -2)), 0)", "GB0036") is None
    assert at(source, "expert_hit.squeeze", "GB0033") is None


def test_declines_a_loop_with_else():
    source = MOE.replace("    return final", "    else:\n        pass\n    return final")
    assert at(source, "expert_hit.squeeze(-1).tolist()", "GB0033") is None
