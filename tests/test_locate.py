"""Locate and line mapping, on real parsed files (no torch)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from gbfix.linemap import LineMap
from gbfix.locate import ParsedFile, owned_frame
from gbfix.records import Break, Cause, Frame
from gbfix.sources import SourceFile


def parsed(text: str) -> ParsedFile:
    return ParsedFile(SourceFile(Path("/x/m.py"), text.encode(), text, "utf-8"))


def test_innermost_node_for_a_span():
    pf = parsed("def f(x):\n    y = x.sum().item() + 1\n    return y\n")
    node = pf.node_at(2, 8, 22)  # x.sum().item()
    assert isinstance(node, cst.Call)
    assert pf.module.code_for_node(node) == "x.sum().item()"


def test_byte_columns_become_character_columns():
    pf = parsed('def f(x):\n    s = "héé"; y = x.item()\n')
    line = pf.lines[1]
    byte_col = line.encode().index(b"x.item()")
    assert pf.char_col(2, byte_col) == line.index("x.item()")
    node = pf.node_at(2, pf.char_col(2, byte_col), pf.char_col(2, byte_col + len(b"x.item()")))
    assert pf.module.code_for_node(node) == "x.item()"


def test_span_running_onto_a_later_line_takes_the_largest_expression_starting_there():
    pf = parsed('def f(x):\n    print(\n        "a",\n        x,\n    )\n')
    node = pf.node_at(2, 4, 3)  # end column belongs to a later line
    assert isinstance(node, cst.Call)


def test_no_column_takes_the_innermost_node_holding_the_line():
    pf = parsed("def gen(x):\n    yield x\n")
    assert isinstance(pf.node_at(1, None, None), cst.FunctionDef)


def test_owned_frame_is_the_innermost_frame_in_the_targets(tmp_path):
    mine = tmp_path / "model.py"
    mine.write_text("")
    stack = (
        Frame(str(mine), 3, 4, 10, "forward"),
        Frame("/usr/lib/python3.11/copy.py", 128, 8, 20, "deepcopy"),
    )
    brk = Break((Cause("GB4198", "deepcopy", ""),), stack)
    path, frame = owned_frame(brk, {mine.resolve()})
    assert (path, frame.line) == (mine.resolve(), 3)
    assert owned_frame(brk, {tmp_path / "other.py"}) is None


def test_line_map_untouched_rewritten_and_inserted_lines():
    before = "import torch\n\ndef f(x):\n    print(x)\n    return x\n"
    after = "import torch\n\ndef f(x):\n    torch._higher_order_ops.print(\n        '{!s}', x)\n    return x\n"
    lm = LineMap(before, after)
    assert lm(1).line == 1 and not lm(1).rewritten
    assert lm(4).line == 4 and lm(4).rewritten and lm(5).rewritten
    assert lm(6).line == 5 and not lm(6).rewritten
