"""--html FILE: the self-contained HTML report, rendered in a real headless browser.

One real `gbfix --dry-run --html` run (module fixture) of a program with three breaks:
a print that gets a verified fix, an `int(t)` whose only route (capture_scalar_outputs) is
declined, a process-wide setting in a module others import, and a `randn(generator=...)`
that no recipe fixes. Its page is opened with `chromium --headless`: `--dump-dom` for
the rendered DOM (asserted on as text) and `--screenshot` (a non-blank PNG of the window's
size). Without a chromium binary those tests are skipped; the page's HTML is still
checked. The other tests render hand-made engine records (no torch).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import textwrap
import zlib
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gbfix import html_report
from gbfix.engine import Finding, Result
from gbfix.entry import Entry
from gbfix.records import Break, Cause, Edit, Frame, Outcome, RunResult, Site
from gbfix.sources import SourceFile
from tests.conftest import run_gbfix

pytestmark = pytest.mark.xdist_group("html")

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WINDOW = (1200, 1600)

MODEL = textwrap.dedent(
    """\
    import torch

    CACHE = {}


    @torch.compile(backend="eager")
    def step(x):
        print("step <b>&amp;</b>", x.shape)
        n = int(x.sum())
        if n in CACHE:
            return x + CACHE[n]
        CACHE[n] = 1.0
        return x * 2


    def draw(x, gen):
        return x + torch.randn(x.shape, generator=gen)


    @torch.compile(backend="eager")
    def noisy(x, gen):
        return draw(x, gen) * 2
    """
)

RUN = textwrap.dedent(
    """\
    import torch

    from pkg.model import noisy, step

    if __name__ == "__main__":
        gen = torch.Generator().manual_seed(0)
        for i in range(2):
            print(step(torch.ones(3) * i).tolist())
        print(noisy(torch.ones(2), gen).tolist())
    """
)


class _Text(HTMLParser):
    """The text of a page, block by block, and the tags inside the source excerpts."""

    BLOCKS = {"p", "div", "li", "tr", "h1", "h2", "h3", "span", "dt", "dd", "section", "pre"}  # a table row is one line

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.depth_pre = 0
        self.in_excerpt: list[str] = []  # tags opened inside <pre class="excerpt">
        self.tags: list[str] = []
        self.style = False  # inside <style>: not text

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if self.depth_pre:
            self.in_excerpt.append(tag)
        if tag == "pre" and ("class", "excerpt") in attrs:
            self.depth_pre += 1
        if tag in self.BLOCKS:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append(" ")
        self.style = tag == "style"

    def handle_endtag(self, tag):
        self.style = False
        if tag == "pre" and self.depth_pre:
            self.depth_pre -= 1

    def handle_data(self, data):
        if not self.style:
            self.parts.append(data)

    @property
    def text(self) -> str:
        return " ".join("".join(self.parts).split())

    @property
    def lines(self) -> list[str]:
        return [" ".join(ln.split()) for ln in "".join(self.parts).splitlines() if ln.strip()]


def parse(page: str) -> _Text:
    p = _Text()
    p.feed(page)
    p.close()
    return p


@pytest.fixture(scope="module")
def chromium() -> str:
    """The browser binary; skips (before gbfix runs) when there is none."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(f"no chromium binary on PATH (looked for {', '.join(BROWSERS)}); on Debian: apt-get install chromium")


def headless(chromium: str, page: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    """Chromium without a sandbox (tests may run as root), a profile of its own, no GPU."""
    cmd = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
        f"--user-data-dir={tmp / 'profile'}", *args, page.resolve().as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "LANG": "C.UTF-8"})


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """One real `gbfix --dry-run --html report.html` run."""
    root = tmp_path_factory.mktemp("html") / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text(MODEL)
    (root / "run.py").write_text(RUN)
    proc = run_gbfix("--dry-run", "-q", "-e", "python run.py", "--html", "report.html", "pkg", cwd=root)
    assert proc.returncode == 1, proc.stderr
    return root, proc


def test_the_run_writes_the_report_and_says_so(fixed):
    root, proc = fixed
    assert "wrote the HTML report report.html" in proc.stderr.splitlines()
    page = (root / "report.html").read_text(encoding="utf-8")
    assert (root / "pkg" / "model.py").read_text() == MODEL  # --dry-run: the report is the only file written
    # user code is text, never markup; nothing is loaded from anywhere
    assert 'print(&quot;step &lt;b&gt;&amp;amp;&lt;/b&gt;&quot;, x.shape)' in page
    assert parse(page).in_excerpt.count("b") == 0
    for external in ("<script", "<link", "<img", "<iframe", "@import", "url("):
        assert external not in page
    assert "default-src 'none'" in page


def test_rendered_dom_lists_each_break_with_its_verdict(chromium, fixed, tmp_path):
    root, _ = fixed
    proc = headless(chromium, root / "report.html", "--dump-dom", tmp=tmp_path)
    assert proc.returncode == 0 and "<main>" in proc.stdout, proc.stderr[-2000:]
    dom = parse(proc.stdout)
    text, lines = dom.text, dom.lines
    assert "gbfix fix: 3 graph breaks, 1 recompile site" in lines  # `n in CACHE` guards on n, which changes
    assert "Found 3 graph break sites: 1 fixable (verified; --apply writes them), 2 not fixable (GB0124 at pkg/model.py:9)." in text
    # the print: its registry entry, its line highlighted in the excerpt, the verified hunk
    assert "GB0059 fixed pkg/model.py:8:5" in text
    assert "Failed to trace builtin operator (Dynamo's page)" in text
    assert '8 print("step <b>&amp;</b>", x.shape)' in lines  # the excerpt's line, as text
    assert "Fixed by print-to-op (verified; --apply writes it): re-run, the break is gone and the program behaves the same." in text
    assert '+ gbfix_print("step <b>&amp;</b> {}", str(x.shape))' in lines
    # int(t): the config route declined (pkg/model.py is imported, not the program's start), with
    # the reason and the escape hatch
    assert "GB0124 not fixable pkg/model.py:9:9" in text
    assert (
        "capture-scalar-outputs: a torch._dynamo.config setting is process-wide: it belongs where "
        "the program starts (the entry script, before the first compiled call), not in a module others import; "
        "give gbfix the entry script as a target too"
    ) in text
    assert "+torch._dynamo.config.capture_scalar_outputs = True" not in lines
    assert "Escape hatch (by hand): read the number outside the compiled region" in text
    # the generator: no recipe
    assert "GB0055 not fixable pkg/model.py:17:16" in text
    assert "Not fixable: no recipe applies" in text and "17 return x + torch.randn(x.shape, generator=gen)" in lines
    # before / after: the print's break is gone
    assert "graph breaks (Dynamo's reports) 3 2" in lines
    assert "break sites in the targets 3 2" in lines
    assert any(ln.startswith("graphs compiled ") and all(w.isdigit() for w in ln.split()[2:]) for ln in lines)


def test_screenshot_is_a_non_blank_png(chromium, fixed, tmp_path):
    root, _ = fixed
    shot = tmp_path / "report.png"
    proc = headless(chromium, root / "report.html", f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", tmp=tmp_path)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    width, height, pixels = read_png(shot.read_bytes())
    assert (width, height) == WINDOW
    colours = {pixels[i : i + 3] for i in range(0, len(pixels), 3 * 7)}  # every 7th pixel
    assert len(colours) > 50  # text, badges, highlighted lines: not one flat colour
    background = max(colours, key=lambda c: pixels.count(c, 0, 3 * 20000))
    different = sum(1 for i in range(0, len(pixels), 3 * 11) if pixels[i : i + 3] != background)
    assert different > len(pixels) // (3 * 11) // 20  # over 5% of the window is not background


def read_png(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and RGB bytes of an 8-bit RGB / RGBA PNG (what Chromium writes), unfiltered."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    out, prev = bytearray(), bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        out += line if channels == 3 else bytes(v for i, v in enumerate(line) if i % 4 != 3)
        prev = line
    return width, height, bytes(out)


# --- hand-made records (no torch, no browser) ----------------------------------------------


def _result(tmp_path: Path) -> Result:
    model = tmp_path / "m.py"
    source = 'import torch\n\n\ndef f(x):\n    print("<script>alert(1)</script>")\n    return x\n'
    model.write_text(source)
    brk = Break((Cause("GB0059", "Failed to trace builtin operator", "<img src=x>"),), (Frame(str(model), 5, 4, 40, "f"),))
    findings = (
        Finding(model, 5, 5, "GB0059", 'Failed to trace "<img src=x onerror=alert(1)>"', "fixable-unsafe",
                "fixable with --unsafe-fixes (x & y)", brk),
        Finding(None, 3, None, "GB0007", "skipped <call>", "outside", "outside the targets (/lib/<x>.py)"),
    )
    stray = Edit(1, Site(model, 2, 0, 1, Break((Cause("GB0170", "x", ""),), ())), "branch-to-where", "safe", "if -> where", (2, 0), (2, 1), None, None)
    run = RunResult((brk,), "", (), (), 2, Path("/nonexistent"), None, (), "2.13.0", frozenset(), 0.0, graphs=4)
    return Result(
        entry=Entry("script", str(tmp_path / "run.py"), (), tmp_path, "python run.py --tag '<x>'"),
        findings=findings, outcomes=(Outcome(stray, "rejected:output-mismatch", "stdout differs: <b>"),),
        originals={model: SourceFile(model, source.encode(), source, "utf-8")}, fixed={}, remaining=1, fullgraph=None,
        baseline=run, runs=2, seconds=3.0, notes=("a note with <tags> & ampersands",), final=run,
    )


def test_everything_from_the_user_or_dynamo_is_escaped(tmp_path):
    page = html_report.render(_result(tmp_path), summary="Found <2>.", display=lambda p: p.name, explanation=lambda code: None)
    dom = parse(page)
    assert set(dom.tags) <= {"html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "p", "dl", "dt", "dd",
                             "table", "tr", "th", "td", "ol", "ul", "li", "a", "code", "span", "section", "div", "pre", "b"}
    assert "<script>alert" not in page and "<img src=x" not in page and "<tags>" not in page
    text = dom.text
    for shown in ('print("<script>alert(1)</script>")', 'Failed to trace "<img src=x onerror=alert(1)>"', "Found <2>.",
                  "python run.py --tag '<x>'", "a note with <tags> & ampersands", "Fixable with --unsafe-fixes (x & y)",
                  "Outside the targets (/lib/<x>.py)", "stdout differs: <b>"):
        assert shown in text, shown


def test_statuses_counts_and_edits_without_a_site(tmp_path):
    dom = parse(html_report.render(_result(tmp_path), display=lambda p: p.name, explanation=lambda code: None))
    text, lines = dom.text, dom.lines
    assert "GB0059 fixable with --unsafe-fixes m.py:5:5" in text and "GB0007 (no site in the targets) outside the targets" in text
    assert "graphs compiled 4 4" in lines and "before after (no edit)" in lines  # no file changed: after is before
    # an outcome whose site is no finding is listed, not lost
    assert "Other edits" in lines and "branch-to-where (safe) at m.py:2: rejected: the program behaves differently" in text


def test_check_pages_have_no_after_column(tmp_path):
    result = _result(tmp_path)
    new = Finding(result.findings[0].path, 5, 5, "GB0059", "print", "new", "new: not in the baseline")
    page = html_report.render(replace(result, findings=(new,), outcomes=(), final=None), command="check", display=lambda p: p.name,
                              explanation=lambda code: {"gb_type": "Failed to trace builtin operator", "explanation": None, "hints": ["Use <x>."]})
    dom = parse(page)
    assert "gbfix check: 1 graph break" in dom.lines and "this run" in dom.lines and "before" not in dom.text
    assert "GB0059 new: not in the baseline m.py:5:5" in dom.text and "New: not in the baseline" in dom.lines
    assert "Hint: Use <x>." in dom.text and "(no fixed text: Dynamo writes it at run time; its message is above)" in dom.text


def test_html_into_a_missing_folder_is_a_usage_error_before_anything_runs(tmp_path):
    proc = run_gbfix("--html", "nope/report.html", "-e", "python run.py", ".", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "gbfix: error: Invalid value for '--html': nope/report.html: no such folder 'nope'\n"
