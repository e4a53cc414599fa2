"""Edits keep the file's encoding, line endings, comments and every untouched line byte-identical."""

from __future__ import annotations

from pathlib import Path

from gbfix import engine
from gbfix.entry import parse

SOURCE = (
    "# -*- coding: latin-1 -*-\r\n"
    "# café au lait: a comment in latin-1\r\n"
    "import torch\r\n"
    "\r\n"
    "\r\n"
    "@torch.compile(backend=\"eager\")\r\n"
    "def step(x):   # odd spacing kept\r\n"
    "    print(\"stepping\", x.shape)\r\n"
    "    return x * 2  # trailing comment\r\n"
    "\r\n"
    "\r\n"
    "if __name__ == \"__main__\":\r\n"
    "    print(step(torch.ones(2)))\r\n"
)


def test_latin1_crlf_file_round_trips(tmp_path: Path):
    script = tmp_path / "prog.py"
    script.write_bytes(SOURCE.encode("latin-1"))
    result = engine.fix([script], parse("python prog.py", tmp_path))
    new = result.fixed[script.resolve()]
    before_lines = SOURCE.encode("latin-1").split(b"\r\n")
    after_lines = new.split(b"\r\n")
    assert b"\n" not in new.replace(b"\r\n", b"")  # no bare LF introduced
    assert new.decode("latin-1").count("café") == 1  # still latin-1, not re-encoded
    changed = [line for line in before_lines if line not in after_lines]
    assert changed == [b'    print("stepping", x.shape)']
    # every other line is kept, in order; what is new is the call and the helper gbfix adds
    kept = iter(after_lines)
    assert all(any(line == a for a in kept) for line in before_lines if line not in changed)
    added = [line for line in after_lines if line not in before_lines]
    assert b'    gbfix_print("stepping {}", str(x.shape))' in added
    assert b"def gbfix_print(fmt, *values):" in added
