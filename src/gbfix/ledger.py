"""The engine's ledger of break sites: every site the rounds saw, in the original
files' coordinates, and what became of it.

Edits move lines, so a site is keyed by where it was in the original files
(path, line, column, code, and the library frame behind the user's call). Per
site the ledger keeps the edits proposed for it, the recipes whose edit failed
(and whether they may try again once the file changes), the recipes that
declined and why, and whether no recipe applied to its file's current version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gbfix.linemap import LineMap
from gbfix.locate import library_leaf
from gbfix.records import Break, Edit, Recompile, Site


@dataclass(frozen=True)
class Finding:
    """One break site as the report shows it, in the coordinates of the original files."""

    path: Path | None  # None: the break never enters the targets
    line: int
    col: int | None  # 1-based character column
    code: str
    message: str
    status: str  # fixed | unfixed | outside | fixable-unsafe | recompile
    detail: str = ""
    brk: Break | None = field(default=None, compare=False, repr=False)
    # A recompile finding (gbfix.recompiles): the recompiles it stands for, oldest first
    recompiles: tuple[Recompile, ...] = field(default=(), compare=False, repr=False)


def message(brk: Break) -> str:
    """A break's one-line message: its root cause's type and explanation (and the reported chain head)."""
    root = brk.root
    text = root.gb_type
    if root.explanation:
        text += f": {root.explanation}"
    if len(brk.causes) > 1:
        text += f" (reported as {brk.top.code or brk.top.gb_type}: {brk.top.gb_type})"
    return text


@dataclass(frozen=True)
class Snapshot:
    """What a round may have to undo: the verdicts and coordinates before it committed."""

    to_original: dict[Path, LineMap]
    rejected: dict[tuple, dict[str, int | None]]
    hopeless: dict[tuple, int]


class SiteLedger:
    """Sites by original key, with their history (``generation``: a file version's id)."""

    def __init__(self) -> None:
        self.to_original: dict[Path, LineMap] = {}  # current generation -> original lines
        self.seen: dict[tuple, Finding] = {}  # first sight of every site
        self._edits: dict[int, tuple] = {}  # edit id -> its site's key
        # Sites no recipe could fix: key -> the version of its file then. A later
        # edit to that file (a loop rewritten, a config set) may make one fixable.
        self._hopeless: dict[tuple, int] = {}
        # Key -> recipes whose edit for it failed -> None (not again), or the version
        # of its file then: the edit's span held other breaks (an `if` whose arm
        # breaks too), and once an edit for them changes the file it is tried again.
        self._rejected: dict[tuple, dict[str, int | None]] = {}
        self._declines: dict[tuple, dict[str, str]] = {}  # key -> recipe -> why it declined

    # --- coordinates ------------------------------------------------------
    def key(self, site: Site) -> tuple:
        """The site's key: where it was in the original files."""
        lm = self.to_original.get(site.path)
        at = lm(site.line) if lm else None
        line = at.line if at else site.line
        leaf = library_leaf(site.brk, site.path)  # breaks in a library behind one call are apart
        if at is not None and at.rewritten:
            # A line an edit rewrote: its columns are new; the same code on the same
            # original line is the break seen before (an `.item()` kept inside a new print).
            for key in self.seen:
                if key[0] == site.path and key[1] == line and key[3] == site.code and key[4] == leaf:
                    return key
        return (site.path, line, site.col, site.code, leaf)

    def note(self, site: Site) -> tuple:
        """Record the site (first sight wins); its key."""
        key = self.key(site)
        if key not in self.seen:
            col = None if site.col is None else site.col + 1
            self.seen[key] = Finding(site.path, key[1], col, site.code, message(site.brk), "unfixed", "", site.brk)
        return key

    def site_of(self, edit: Edit) -> tuple:
        """The key of the site an edit was proposed for."""
        return self._edits[edit.id]

    # --- history ----------------------------------------------------------
    def proposed(self, edit: Edit) -> None:
        self._edits[edit.id] = self.key(edit.site)

    def declined(self, site: Site, recipe: str, why: str) -> None:
        self._declines.setdefault(self.key(site), {})[recipe] = why

    def may_try(self, site: Site, recipe: str, generation: int) -> bool:
        """False when the recipe's edit failed here before and nothing it held was fixed since."""
        tried = self._rejected.get(self.key(site), {})
        return not (recipe in tried and tried[recipe] in (None, generation))

    def failed(self, edit: Edit, retry: int | None) -> None:
        """The edit failed; ``retry``: the file version after which it may be tried again."""
        self._rejected.setdefault(self.site_of(edit), {})[edit.recipe] = retry

    def no_edit(self, site: Site, generation: int) -> None:
        """No recipe fixed the site in this version of its file."""
        self._hopeless[self.key(site)] = generation

    def worth_proposing(self, key: tuple, generation: int) -> bool:
        """Whether the file changed since no recipe fixed this site."""
        return self._hopeless.get(key) != generation

    def no_recipe(self, key: tuple) -> str:
        """Why no edit was proposed for a site, with what the recipes that looked said."""
        said = self._declines.get(key)
        return "no recipe applies" + (f" ({'; '.join(f'{r}: {why}' for r, why in said.items())})" if said else "")

    # --- going back -------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return Snapshot(dict(self.to_original), {k: dict(v) for k, v in self._rejected.items()}, dict(self._hopeless))

    def restore(self, snap: Snapshot) -> None:
        self.to_original = dict(snap.to_original)
        self._rejected = {k: dict(v) for k, v in snap.rejected.items()}
        self._hopeless = dict(snap.hopeless)
