"""The engine: detect -> locate -> propose -> verify, in rounds, then a check on the program's own backend.

Nothing here prints or writes the user's files: ``fix`` returns a Result that
the CLI reports, and ``write`` writes it.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import libcst as cst

from gbfix import (
    compound,
    escape,
    fullgraph,
    generated,
    recipes,
    recompiles,
    result_cache,
    scratch,
    sources,
    writes,
)
from gbfix import edits as edit_ops
from gbfix.detect import Pending, Prober, RunFailed, warm_worker
from gbfix.entry import Entry
from gbfix.errors import EntryError
from gbfix.launch import Lease, Warm
from gbfix.ledger import Finding, SiteLedger, Snapshot, message
from gbfix.linemap import LineMap
from gbfix.locate import Locator, library_leaf, owned_frame
from gbfix.records import Edit, ObservedCall, Outcome, Recompile, RunResult, Site, Status
from gbfix.sources import SourceFile
from gbfix.suppress import Filter
from gbfix.verify import (
    Noise,
    TrialBreak,
    behaviour_diff,
    describe,
    place,
    site_key,
    site_verdict,
)

MAX_ROUNDS = 4
# Edits that moved their break, tried again joined with a fix of the next break, per round
MAX_COMPOUNDS = 4


@dataclass(frozen=True)
class Options:
    unsafe_fixes: bool = False
    fullgraph: bool = False  # aim for zero breaks and prove it with fullgraph=True
    timeout: float = 900.0
    max_rounds: int = MAX_ROUNDS
    selection: Filter = Filter()  # select / ignore, and `# gbfix: ignore` comments: sites left alone
    backend: str = "own"  # the final check's: "own" (the program's), "eager" or "inductor"
    # prove that, warm, the program compiles nothing again (set_stance("fail_on_recompile"))
    zero_recompiles: bool = False

    @property
    def final_backend(self) -> str:
        """The child's mode for the final check (see ``child.compile_patch``)."""
        return "own" if self.backend == "own" else f"force:{self.backend}"


@dataclass(frozen=True)
class Result:
    entry: Entry
    findings: tuple[Finding, ...]
    outcomes: tuple[Outcome, ...]
    originals: dict[Path, SourceFile]
    fixed: dict[Path, bytes]  # only files that change; a path not in ``originals`` is a new file
    remaining: int  # break sites left after the accepted edits: the findings not fixed (own backend when checked)
    fullgraph: bool | None  # None: not asked; else whether fullgraph=True was added and proven
    baseline: RunResult
    runs: int
    seconds: float
    notes: tuple[str, ...] = ()
    final: RunResult | None = None  # the run ``remaining`` is judged on (the edited program; the baseline if nothing changed)
    recompiles_proven: bool | None = None  # None: not asked; else whether ``prove_zero_recompiles`` proved it

    def diff(self, display: Callable[[Path], str] = str) -> str:
        return "".join(
            edit_ops.diff(p, self.originals[p].data, new, self.originals[p].encoding, display(p))
            if p in self.originals
            else edit_ops.diff(p, None, new, "utf-8", display(p))
            for p, new in sorted(self.fixed.items())
        )


class _Session:
    """One gbfix run: state shared by the rounds."""

    def __init__(
        self, entry: Entry, targets: dict[Path, SourceFile], opts: Options, workdir: Path, progress, worker: Warm | Lease | None
    ) -> None:
        self.entry, self.opts, self.progress = entry, opts, progress
        self.originals = targets
        self.targets = set(targets)
        self.entry_file = entry.own_file(self.targets)  # where a process-wide setting goes
        self.current: dict[Path, SourceFile] = dict(targets)  # the generation being edited
        self.prober = Prober(entry, workdir, opts.timeout, worker=worker or warm_worker(entry, opts.timeout))
        self.ids = itertools.count(1)
        self.applied: dict[tuple[Path, frozenset[int]], bytes] = {}  # edits of one file -> its bytes, this generation
        self.outcomes: list[Outcome] = []
        self.ledger = SiteLedger()
        self.notes: list[str] = []
        self.noise: Noise | None = None  # run-to-run differences of the original, once measured
        self.own_reference: RunResult | None = None  # the original on its own backend, if needed
        self.uncompiled: RunResult | None = None  # the original with Dynamo off, if needed
        self.uncompiled_started: Pending | None = None  # that run, started before it was needed
        self.last_own: RunResult | None = None  # latest passing own-backend run of the edits
        # While not None, rounds skip their own-backend check and leave a checkpoint here
        # for ``check_deferred``; None: each round checks its own edits.
        self.deferred: list[_Checkpoint] | None = None
        # The own-backend run started alongside the latest trial, and what it runs.
        self.speculative: tuple[dict[Path, bytes], Pending] | None = None
        # Calls of user functions seen in uncompiled runs: (path, first line, generation) -> calls
        self.observed: dict[tuple[Path, int, int], tuple[ObservedCall, ...]] = {}
        # Recompile sites the recompile round answered (``recompiles.site_of``) -> what was
        # tried (the last rejected edit's verdict, or what the recipes that looked said), the
        # unsafe recipe that would apply, and the recipe of the edit kept (None: none kept)
        self.recompile_sites: dict[tuple, tuple[str, str | None, str | None]] = {}
        # Sites (ledger keys) -> recipes whose edit removed the break but broke again further
        # on (rejected:new-break): tried once more, joined with a fix of the next break
        self.moved: dict[tuple, list[str]] = {}

    # --- runs -------------------------------------------------------------
    def _edited(self, edits: list[Edit], locator: Locator) -> dict[Path, bytes]:
        """New contents of the files the edits touch (current generation + edits)."""
        by_file: dict[Path, list[Edit]] = {}
        for e in edits:
            by_file.setdefault(e.path, []).append(e)
        out = {}
        for path, eds in by_file.items():
            # a trial's files are applied again on commit: edit ids are unique, so the key holds
            key = (path, frozenset(e.id for e in eds))
            if key not in self.applied:
                self.applied[key] = edit_ops.apply(locator.parsed(path), eds)
            out[path] = self.applied[key]
        return out

    def _overlay(self, edits: list[Edit], locator: Locator) -> tuple[dict[Path, bytes], dict[Path, LineMap]]:
        """Contents of every file that differs from disk once ``edits`` apply, and their line maps."""
        edited = self._edited(edits, locator)
        overlay = {p: edited.get(p, src.data) for p, src in self.current.items()}
        overlay = {p: data for p, data in overlay.items() if data != self.originals[p].data}
        maps = {p: LineMap(self.current[p].text, data.decode(self.current[p].encoding)) for p, data in edited.items()}
        return overlay, maps

    def trial(self, edits: list[Edit], locator: Locator) -> tuple[RunResult | None, str | None, list[TrialBreak]]:
        overlay, maps = self._overlay(edits, locator)
        if self.deferred is not None:
            self.speculate(overlay)
        elif self.uncompiled is None and self.uncompiled_started is None:
            # No own-backend run goes beside the trials: start the uncompiled reference on
            # the other core. A trial that makes a print or a warning show as it does
            # uncompiled differs from the compiled original, and then needs it next.
            self.uncompiled_started = self.prober.start(baseline=self.baseline.outputs_path, backend="none")
        self.progress(f"trial run with {len(edits)} edit(s)")
        try:
            result = self.prober.run(overlay=overlay, baseline=self.baseline.outputs_path)
        except RunFailed as e:
            return None, f"the edited program failed: {e}", []
        return result, None, place(result, self.targets, maps)

    def own_trial(self, edits: list[Edit], locator: Locator) -> tuple[RunResult | None, str]:
        overlay, _ = self._overlay(edits, locator)
        return self.own_run(overlay, _tolerated(edits), f"{len(edits)} edit(s)")

    def speculate(self, overlay: dict[Path, bytes]) -> None:
        """Start the own-backend check of ``overlay`` alongside its trial, on another core:
        when the trial's edits turn out to be all that is accepted, it is the final check."""
        if self.speculative is not None:
            if self.speculative[0] == overlay:
                return
            self.speculative[1].cancel()
        pending = self.prober.start(overlay=overlay, baseline=self.baseline.outputs_path, backend=self.opts.final_backend)
        self.speculative = (overlay, pending)

    def own_run(
        self, overlay: dict[Path, bytes], tolerate: frozenset[str], what: str, started: Pending | None = None
    ) -> tuple[RunResult | None, str]:
        """A run on the program's own backend (e.g. inductor, which rejects code eager accepts).

        It is compared to the eager baseline first; if that differs (inductor's
        rounding can show in printed numbers), the original program is run once
        on its own backend and that run is the reference from then on.
        ``started``: the run, already started against the eager baseline.
        """
        while True:
            expected = self.own_reference or self.baseline
            if started is None:
                self.progress(f"own-backend run with {what}")
                started = self.prober.start(overlay=overlay, baseline=expected.outputs_path, backend=self.opts.final_backend)
            else:
                self.progress(f"own-backend run with {what}: started alongside the trial")
            try:
                result, started = started.result(), None
            except RunFailed as e:
                return None, f"the edited program fails on its own backend: {e}"
            diff = behaviour_diff(expected, result, tolerate, self.noise or Noise())
            if diff is None or self.matches_uncompiled(result, tolerate):
                return result, ""
            if self.own_reference is not None or self.baseline.compile_failure:
                return None, f"on its own backend, {diff}"
            self.progress("running the original on its own backend for reference")
            try:
                self.own_reference = self.prober.run(backend=self.opts.final_backend)
            except RunFailed as e:
                raise EntryError(f"the entry `{self.entry.text}` fails on its own backend: {e}") from None

    def own_settle(self, group: list[Edit], kept: list[Edit], locator: Locator, failed: str = "") -> RunResult | None:
        """Keep the part of ``group`` that also works on the own backend (halving on failure).

        ``failed``: why ``kept + group`` is already known to fail (its run is not repeated).
        """
        result, why = (None, failed) if failed else self.own_trial(kept + group, locator)
        if result is not None:
            kept.extend(group)
            return result
        if len(group) == 1:
            self.outcomes = [Outcome(o.edit, "rejected:backend", why) if o.edit is group[0] else o for o in self.outcomes]
            self.ledger.failed(group[0], retry=None)
            return None
        mid = len(group) // 2
        first = self.own_settle(group[:mid], kept, locator)
        return self.own_settle(group[mid:], kept, locator) or first

    def cancel_speculation(self, keep: Pending | None = None) -> None:
        if self.speculative is not None and self.speculative[1] is not keep:
            self.speculative[1].cancel()
        self.speculative = None

    # --- proposing ----------------------------------------------------------
    def _context(self, site: Site, locator: Locator, caps: frozenset[str], recompile: Recompile | None = None) -> recipes.SiteContext:
        """A recipe's view of the site (``recompile``: the latest recompile of a recompile site)."""
        path = site.path
        gen = self._generation(path)
        seen = {(path, line): calls for (p, line, g), calls in self.observed.items() if p == path and g == gen}
        entry = locator.parsed(self.entry_file) if self.entry_file else None
        return recipes.SiteContext(site, locator.node(site), locator.parsed(path), caps, seen, entry, recompile)

    def observe(self, sites: list[Site], locator: Locator, caps: frozenset[str]) -> None:
        """Record, in one uncompiled run, the calls of the functions recipes asked to see."""
        wanted: set[tuple[Path, int]] = set()
        for site in sites:
            ctx = self._context(site, locator, caps)
            for recipe in recipes.candidates(site.code, unsafe=self.opts.unsafe_fixes):
                fn = recipe().observation(ctx)
                if fn is not None:
                    parsed = locator.parsed(site.path)
                    first = parsed.span(fn.decorators[0] if fn.decorators else fn)[0][0]
                    if (site.path, first, self._generation(site.path)) not in self.observed:
                        wanted.add((site.path, first))
        if not wanted:
            return
        overlay = {p: s.data for p, s in self.current.items() if s.data != self.originals[p].data}
        self.progress(f"observing {len(wanted)} function(s) in an uncompiled run")
        try:
            result = self.prober.run(overlay=overlay, backend="none", observe=tuple(sorted(wanted)))
        except RunFailed as e:
            self.notes.append(f"could not observe functions for the wrapper recipes: {e}")
            result = None
        for path, line in wanted:
            calls = result.observed.get((str(path), line), ()) if result else ()
            self.observed[(path, line, self._generation(path))] = calls

    def _generation(self, path: Path) -> int:
        """Which version of the file observations were made on (edits move lines)."""
        return hash(self.current[path].data)

    def propose(
        self, site: Site, locator: Locator, caps: frozenset[str], recompile: Recompile | None = None, only: str | None = None
    ) -> list[Edit]:
        """The edits the recipes propose for the site (``only``: that recipe's, even if it failed before)."""
        ctx = self._context(site, locator, caps, recompile)
        out = []
        gen = self._generation(site.path)
        for recipe in recipes.candidates(site.code, unsafe=self.opts.unsafe_fixes):
            if only is not None:
                if recipe.name != only:
                    continue
            # A recompile site is answered once (``recompile_round``); the ledger keys sites by
            # place, and two of one frame may share one (a size guarded on two dimensions).
            elif recompile is None and not self.ledger.may_try(site, recipe.name, gen):
                continue
            proposer = recipe()
            rw = proposer.propose(ctx)
            if rw is None:
                if proposer.declined:
                    self.ledger.declined(site, recipe.name, proposer.declined)
                continue
            edit = rw.edit(next(self.ids), site, recipe, locator.parsed(site.path))
            self.ledger.proposed(edit)
            out.append(edit)
        return out

    def unsafe_available(self, site: Site, locator: Locator, caps: frozenset[str], recompile: Recompile | None = None) -> str | None:
        """An unsafe recipe that would apply here (not tried: that needs --unsafe-fixes)."""
        ctx = self._context(site, locator, caps, recompile)
        for recipe in recipes.candidates(site.code, unsafe=True):
            if recipe.safety == "unsafe" and recipe().propose(ctx) is not None:
                return recipe.name
        return None

    # --- verifying ----------------------------------------------------------
    def _now_breaks(self, tb: TrialBreak) -> str:
        """The verdict on an edit that made ``tb`` break, its line as the original file numbers it."""
        to_original = self.ledger.to_original.get(tb.path)
        return f"{describe(tb)} now breaks at line {to_original(tb.at.line).line if to_original else tb.at.line}"

    def settle(self, group: list[Edit], accepted: list[Edit], rnd: _Round) -> RunResult | None:
        """Verify ``group`` on top of ``accepted``; extend ``accepted`` with what passes.

        One run for the whole group; halves only when the group fails as a
        whole. Returns the run of exactly the new accepted set when anything
        was accepted.
        """
        result, failure, placed = self.trial(accepted + group, rnd.locator)
        if result is None:
            if len(group) == 1:
                self.reject(group[0], "rejected:output-mismatch", failure or "", rnd)
                return None
            return self._halves(group, accepted, rnd)
        leaves = rnd.leaves()
        bad = {e.id: v for e in group if (v := site_verdict(e, placed, rnd.byte_col(e.site), rnd.codes_in(e), leaves))}
        for e in group:
            if e.id not in bad and _is_global(e) and (tb := rnd.elsewhere(placed, accepted + group)):
                bad[e.id] = ("rejected:new-break", self._now_breaks(tb))
            elif e.id not in bad and e.also and (moved := rnd.moved_to(placed, e)):
                bad[e.id] = ("rejected:new-break", self._now_breaks(moved[0]))
        for e in group:
            if e.id in bad:
                self.reject(e, *bad[e.id], rnd)
        good = [e for e in group if e.id not in bad]
        if not good:
            return None
        diff = self.behaviour_diff(result, _tolerated(accepted + good))
        if diff is None and not bad:
            rnd.present = {(tb.path, tb.at.line, tb.code) for tb in placed if not tb.at.rewritten}
            rnd.revealed |= rnd.present
            accepted.extend(good)
            self.outcomes.extend(Outcome(e, "applied") for e in good)
            return result
        if diff is not None and len(group) == 1:
            self.reject(group[0], "rejected:output-mismatch", diff, rnd)
            return None
        if bad:  # the failing edits may be what changed behaviour: retry without them
            return self.settle(good, accepted, rnd)
        return self._halves(good, accepted, rnd)

    def behaviour_diff(self, result: RunResult, tolerate: frozenset[str]) -> str | None:
        """Behaviour change against the baseline, ignoring what varies between runs of the original."""
        diff = behaviour_diff(self.baseline, result, tolerate, self.noise or Noise())
        if diff is not None and self.noise is None:
            # An exact match with the uncompiled original needs no noise measurement:
            # that run (cheap, no compile) comes first, the original again only if it does not.
            if self.matches_uncompiled(result, tolerate):
                return None
            self.progress("the trial differs: running the original again, to tell changes from run-to-run noise")
            # the original again, as the baseline ran it (uncompiled where it fails compiled)
            pending = self.prober.start(baseline=self.baseline.outputs_path, backend="none" if self.baseline.compile_failure else "eager")
            try:
                again = pending.result()
            except RunFailed as e:
                raise EntryError(f"the entry `{self.entry.text}` failed when run again: {e}") from None
            self.noise = Noise.between(self.baseline, again)
            if self.noise != Noise():
                self.notes.append("the program does not behave identically from run to run; the differing output is not compared")
            diff = behaviour_diff(self.baseline, result, tolerate, self.noise)
        if diff is not None and self.matches_uncompiled(result, tolerate):
            return None
        return diff

    def matches_uncompiled(self, result: RunResult, tolerate: frozenset[str]) -> bool:
        """Whether the run prints, logs and warns exactly as the original does without compile.

        The compiled original can differ from it (a once-per-location warning
        shown twice, because compiling resets warning registries); a rewrite
        that restores the uncompiled behaviour is no regression.
        """
        if result.output_mismatch and "compile-boundary" not in tolerate:
            return False
        if self.uncompiled is None:
            pending, self.uncompiled_started = self.uncompiled_started, None
            if pending is None:
                self.progress("the run differs: running the original without compile, for reference")
                pending = self.prober.start(baseline=self.baseline.outputs_path, backend="none")
            else:
                self.progress("the run differs: comparing with the original run without compile (started with the trial)")
            try:
                self.uncompiled = pending.result()
            except RunFailed as e:
                raise EntryError(f"the entry `{self.entry.text}` failed without compile: {e}") from None
        if behaviour_diff(self.uncompiled, result, tolerate, self.noise or Noise()) is not None:
            return False
        note = "an accepted edit makes the compiled program print, log or warn as the uncompiled one does, where the compiled original differed"
        if note not in self.notes:
            self.notes.append(note)
        return True

    def _halves(self, group: list[Edit], accepted: list[Edit], rnd: _Round) -> RunResult | None:
        mid = len(group) // 2
        first = self.settle(group[:mid], accepted, rnd)
        return self.settle(group[mid:], accepted, rnd) or first

    def reject(self, edit: Edit, status: Status, detail: str, rnd: _Round) -> None:
        self.outcomes.append(Outcome(edit, status, detail))
        if status == "rejected:new-break" and not edit.also:
            self.moved.setdefault(self.ledger.site_of(edit), []).append(edit.recipe)
        # An edit around other breaks (a torch.cond whose branch holds a dynamic-shape
        # op) may fail because of them: it is tried again once the file has changed.
        self.ledger.failed(edit, retry=self._generation(edit.site.path) if rnd.codes_in(edit) else None)

    # --- rounds -------------------------------------------------------------
    def rounds(self, run: RunResult, caps: frozenset[str], first: int) -> RunResult:
        """Rounds ``first``.. until no break is left, nothing is accepted or the rounds run out; the last run."""
        for n in range(first, self.opts.max_rounds):
            if not run.breaks:
                break
            self.progress(f"round {n + 1}: {len(run.breaks)} break(s)")
            ended = self.round(run, caps, n)
            if ended is None:
                ended = self.compound_round(run, caps, n)
            if ended is None:
                break
            run = ended
        return run

    def round(self, run: RunResult, caps: frozenset[str], number: int) -> RunResult | None:
        """One round on the current generation; the run it ends with, or None if nothing was accepted."""
        rnd = _Round(Locator(self.current), self.targets)
        worth: set[tuple] = set()
        for brk in run.breaks:
            site = rnd.locator.site(brk)
            if site is not None:
                key = self.ledger.note(site)
                rnd.sites.setdefault(site_key(site), site)
                if self.ledger.worth_proposing(key, self._generation(site.path)):
                    worth.add(site_key(site))
        # Sites no recipe fixed in this version of their file, deselected or `# gbfix: ignore`d
        # ones get no edit; they stay in rnd.sites: known breaks, not new ones an edit made
        wanted = {
            k: s for k, s in rnd.sites.items()
            if k in worth and self.opts.selection.keeps(s.code, self.current[s.path].text, s.line)
        }
        self.observe(list(wanted.values()), rnd.locator, caps)
        queue = {}
        for key, site in wanted.items():
            edits = self.propose(site, rnd.locator, caps)
            for e in edits:
                if not _alone(e) and e.recipe not in (moved := self.moved.setdefault(self.ledger.site_of(e), [])):
                    moved.append(e.recipe)
            edits = [e for e in edits if _alone(e)]
            if edits:
                queue[key] = edits
            else:
                self.ledger.no_edit(site, self._generation(site.path))
        accepted: list[Edit] = []
        last: RunResult | None = None
        while queue:
            # Sites proposing the same edit (a config route for two .item() calls
            # in one file) share one trial and its fate.
            lead: dict[tuple, Edit] = {}
            for eds in queue.values():
                lead.setdefault(_edit_identity(eds[0]), eds[0])
            heads, blocked = edit_ops.non_overlapping(lead.values(), accepted, against_taken_only=True)
            for e in blocked:  # the site is proposed again next round, against the edited file
                self.outcomes.append(Outcome(e, "deferred:overlap", "overlaps another edit; retried next round"))
            blocked_ids = {_edit_identity(e) for e in blocked}
            for key in [k for k, eds in queue.items() if _edit_identity(eds[0]) in blocked_ids]:
                queue.pop(key)
            if not heads:
                continue
            # Heads that overlap each other wait for the next pass of this round; a
            # process-wide edit is tried on its own, so a break it moves is its own.
            # Source edits are picked first: a config edit must not crowd out one it overlaps.
            group, _ = edit_ops.non_overlapping([e for e in heads if not _is_global(e)] or heads[:1])
            last = self.settle(group, accepted, rnd) or last
            tried = {_edit_identity(e): e for e in group}
            if rnd.present is not None:  # sites an accepted edit fixed on the way need no edit of their own
                for key, eds in list(queue.items()):
                    head = eds[0]
                    if (head.path, head.site.line, head.site.code) not in rnd.present and _edit_identity(head) not in tried:
                        queue.pop(key)
            done = {_edit_identity(e) for e in accepted}
            for key, eds in list(queue.items()):
                ident = _edit_identity(eds[0])
                if ident not in tried:
                    continue
                rest = [] if ident in done else eds[1:]
                if rest:
                    queue[key] = rest
                else:
                    queue.pop(key)
                    if ident not in done:
                        self.ledger.no_edit(eds[0].site, self._generation(eds[0].site.path))
        return self._close(accepted, last, rnd, number, run)

    def _close(self, accepted: list[Edit], last: RunResult | None, rnd: _Round, number: int, run: RunResult) -> RunResult | None:
        """End round ``number`` (started from ``run``): the own-backend check of what it
        accepted (or its checkpoint, when that check is deferred), then the commit."""
        if accepted and self.check_own_backend and self.deferred is None:
            kept: list[Edit] = []
            own = self.own_settle(accepted, kept, rnd.locator)
            if own is not None:
                self.last_own = own
            if len(kept) < len(accepted):
                accepted, last = kept, own
        if not accepted:
            return None
        if self.deferred is not None:
            self.deferred.append(_Checkpoint(
                number, run, accepted, rnd.locator, dict(self.current), len(self.outcomes), self.ledger.snapshot()
            ))
        self._commit(accepted, rnd.locator)
        return last

    def compound_round(self, run: RunResult, caps: frozenset[str], number: int) -> RunResult | None:
        """After a round that accepted nothing: each edit that moves its break further into its
        function (rejected:new-break, or a recipe that is never tried alone), joined with a
        fix of where the break went and verified as one edit (``gbfix.compound``)."""
        rnd = _Round(Locator(self.current), self.targets)
        todo: dict[tuple[tuple, str], Site] = {}  # a site several breaks report (a helper called twice) once
        for brk in run.breaks:
            site = rnd.locator.site(brk)
            if site is not None:
                rnd.sites.setdefault(site_key(site), site)
                key = self.ledger.key(site)
                for recipe in self.moved.get(key, []):
                    todo.setdefault((key, recipe), site)
        accepted: list[Edit] = []
        last: RunResult | None = None
        firsts: list[tuple[tuple, Edit]] = []
        for (key, recipe), site in list(todo.items())[:MAX_COMPOUNDS]:
            self.moved[key].remove(recipe)  # tried once
            firsts.extend((key, first) for first in self.propose(site, rnd.locator, caps, only=recipe))
        for key, first in firsts:
            if any(_edit_identity(first) == _edit_identity(a) for a in accepted):
                continue  # taken with a setting another site's edit needed too
            self.progress(f"round {number + 1}: {first.recipe} at line {key[1]} moves its break; trying it with a fix of the next one")
            for group in self._joined(first, rnd, caps):
                if _is_global(group[-1]) and len(group) > 1:
                    # A setting acts on every site of its kind: the other edits of this recipe go with it
                    group[-1:-1] = [o for _, o in firsts if o is not first and o.recipe == first.recipe and not any(
                        o.overlaps(e) for e in (*group, *accepted))]
                if any(e.overlaps(a) for e in group for a in accepted):
                    continue
                result = self.settle(group, accepted, rnd)
                if result is not None:
                    last = result
                    break
            else:
                self.ledger.failed(first, retry=None)  # not proposed again
        return self._close(accepted, last, rnd, number, run)

    def _joined(self, first: Edit, rnd: _Round, caps: frozenset[str]) -> list[list[Edit]]:
        """``first`` joined with each edit the recipes propose for the break it moved to (the
        trial of ``first`` alone says where that break is): one edit where both are in one
        function, else the two as a group verified together (``compound.pair``)."""
        result, failure, placed = self.trial([first], rnd.locator)
        applied = [o.edit for o in self.outcomes if o.status == "applied"]
        if result is None:
            self.outcomes.append(Outcome(first, "rejected:output-mismatch", failure or ""))
            return []
        # Its own verdict is not asked: the break it moved may show inside its span (a value
        # read back in the `if` body breaks there until the `if` is fixed); the joined edit's is.
        if diff := self.behaviour_diff(result, _tolerated([*applied, first])):
            self.outcomes.append(Outcome(first, "rejected:output-mismatch", diff))
            return []
        middle = rnd.locator.edited(self._edited([first], rnd.locator))
        if _is_global(first):
            return self._joined_setting(first, rnd.moved_anywhere(placed), rnd, middle, caps)
        moved = rnd.moved_to(placed, first)
        if not moved:  # it needs no partner after all: verified as it is
            return [[first]]
        out: list[list[Edit]] = []
        for tb in moved[:1]:  # where the break went first
            then_site = middle.site(tb.brk)
            if then_site is None:
                continue
            for then in self._proposals_after(then_site, middle, caps):
                both = compound.joined(first, then, rnd.locator.parsed(first.path), middle.parsed(first.path), next(self.ids))
                group = [both] if both is not None else compound.pair(first, then, rnd.locator.parsed(first.path))
                for e in group:
                    self.ledger.proposed(e)
                if group:
                    out.append(group)
        return out

    def _proposals_after(self, site: Site, middle: Locator, caps: frozenset[str]) -> list[Edit]:
        """Each recipe's edit for ``site``, a break of the text ``middle`` holds (an edit applied)."""
        # the observed calls are of the unedited file's lines: none for the edited one
        ctx = replace(self._context(site, middle, caps), observed={})
        out = []
        for recipe in recipes.candidates(site.code, unsafe=self.opts.unsafe_fixes):
            rw = recipe().propose(ctx)
            if rw is not None:
                out.append(rw.edit(next(self.ids), site, recipe, middle.parsed(site.path)))
        return out

    def _joined_setting(
        self, first: Edit, moved: list[TrialBreak], rnd: _Round, middle: Locator, caps: frozenset[str]
    ) -> list[list[Edit]]:
        """A setting (``first``) joined with a fix of every break it moved, wherever it moved
        them (one `if len(x) == 0:` per function that selects): one group, each break's
        first proposal; none where a moved break has no proposal (the setting would fail again)."""
        thens: list[Edit] = []
        for tb in moved:
            site = middle.site(tb.brk)
            proposals = self._proposals_after(site, middle, caps) if site is not None else []
            pick = next((p for p in proposals if not any(p.overlaps(t) for t in thens)), None)
            if pick is None:
                return []
            if any(_edit_identity(pick) == _edit_identity(t) for t in thens):
                continue  # a site several breaks report (a helper called twice)
            thens.append(pick)
        group: list[Edit] = []
        for then in thens:
            pair = compound.pair(first, then, rnd.locator.parsed(first.path))
            if not pair:
                return []
            group.append(pair[0])
        group.append(first)
        for e in group:
            self.ledger.proposed(e)
        return [group] if thens else []

    def check_deferred(self, run: RunResult, caps: frozenset[str]) -> RunResult:
        """The own-backend check of all rounds' edits in one run; ``run`` is the last round's.

        When it fails, the rounds are checked one by one from the first; the first
        round that loses an edit is kept without it, and the rounds after it, built
        on the lost edit, are done again with a check each.
        """
        checkpoints, self.deferred = self.deferred or [], None
        if not checkpoints:
            self.cancel_speculation()
            return run
        overlay = {p: s.data for p, s in self.current.items() if s.data != self.originals[p].data}
        applied = [o.edit for o in self.outcomes if o.status == "applied"]
        started = self.speculative[1] if self.speculative and self.speculative[0] == overlay else None
        self.cancel_speculation(keep=started)
        own, why = self.own_run(overlay, _tolerated(applied), f"every accepted edit ({len(applied)})", started)
        if own is not None:
            self.last_own = own
            return run
        self.progress(f"checking the edits round by round: {why}")
        for n, cp in enumerate(checkpoints, 1):
            self.current = dict(cp.current)
            self.outcomes = self.outcomes[: cp.outcomes]
            self.ledger.restore(cp.ledger)
            self.applied.clear()
            kept: list[Edit] = []
            # the last round's edits on top of all earlier ones: the run that failed
            own = self.own_settle(cp.accepted, kept, cp.locator, why if n == len(checkpoints) else "")
            if own is not None:
                self.last_own = own
            if kept:
                self._commit(kept, cp.locator)
            if len(kept) < len(cp.accepted):
                return self.rounds(own or cp.started, caps, cp.number + 1)
        return run

    def _commit(self, accepted: list[Edit], locator: Locator) -> None:
        """Make the accepted edits the next generation of the files."""
        edited = self._edited(accepted, locator)
        self.applied.clear()  # the next generation parses anew
        for path, data in edited.items():
            src = self.current[path]
            self.current[path] = SourceFile(path, data, data.decode(src.encoding), src.encoding)
            self.ledger.to_original[path] = LineMap(self.originals[path].text, self.current[path].text)

    # --- the whole run --------------------------------------------------------
    def run(self) -> Result:
        started = time.perf_counter()
        self.progress(f"baseline run of `{self.entry.text}`")
        self.baseline = self.prober.baseline(uncompiled_fallback=True)
        if self.baseline.compile_failure:
            self.uncompiled = self.baseline  # the uncompiled reference already: not run again
            self.notes.append(
                f"`{self.entry.text}` fails under torch.compile as it is ({self.baseline.compile_failure}) and runs"
                " without it: gbfix compared its edits with the run without compile"
            )
        self.prober.one_at_a_time = bool(self.baseline.wrote)
        # When every torch.compile call already uses the eager backend, an
        # own-backend run would only repeat a trial run.
        # --backend eager: the trials are that check; --backend inductor: always run it.
        self.check_own_backend = self.opts.backend == "inductor" or (
            self.opts.backend == "own" and not all(like_eager for *_, like_eager in self.baseline.compile_sites)
        )
        caps = self.baseline.capabilities
        if self.check_own_backend:
            # leaf_function does not lower in inductor (torch 2.13: InductorError
            # in get_attr); offering it there only costs failed own-backend runs.
            caps = caps - {"leaf_function"}
        # Optimistic: one own-backend run checks the edits of all rounds at the end.
        self.deferred = [] if self.check_own_backend else None
        run = self.check_deferred(self.rounds(self.baseline, caps, 0), caps)
        if self.uncompiled_started is not None:  # not needed after all
            self.uncompiled_started.cancel()
            self.uncompiled_started = None
        if self.last_own is not None:
            run = self.last_own  # what is left, counted on the program's own backend
        run = self.recompile_round(run, caps)
        proven = self.prove_fullgraph(run) if self.opts.fullgraph else None
        warm = self.prove_zero_recompiles(run) if self.opts.zero_recompiles else None
        fixed = {p: s.data for p, s in self.current.items() if s.data != self.originals[p].data}
        if self.baseline.compile_failure and not fixed:
            raise EntryError(
                f"the entry `{self.entry.text}` failed: {self.baseline.compile_failure} (under torch.compile; without it"
                " the program runs, and no edit gbfix verified makes it run compiled)"
            )
        fixed |= generated.complete(fixed)  # the packages' generated modules: new, or extended
        final = run.recompiles if run is not self.baseline else None
        findings = tuple(recompiles.merge(self.findings(run, caps), self.baseline.recompiles, self.originals, final, self.recompile_left))
        return Result(
            entry=self.entry,
            findings=findings,
            outcomes=tuple(self.outcomes),
            originals=self.originals,
            fixed=fixed,
            # Sites, as the findings count them: Dynamo reports one site once per frame it breaks in.
            remaining=recompiles.still_breaking(findings),
            fullgraph=proven,
            baseline=self.baseline,
            runs=self.prober.runs,
            seconds=time.perf_counter() - started,
            notes=(*self.notes, *self.baseline.recompile_notes, *self.prober.notes, runs_note(self.entry, self.prober.runs, self.baseline)),
            final=run,
            recompiles_proven=warm,
        )

    # --- recompiles -------------------------------------------------------------
    def recompile_round(self, run: RunResult, caps: frozenset[str]) -> RunResult:
        """Recompile sites answered like break sites, one edit at a time on the current
        generation: an edit is kept when the program behaves the same, no break is new
        and the recompiles of its site go down (on the own backend too, when checked)."""
        tried: set[tuple] = set()
        while True:
            todo = [
                f for f in recompiles.findings(run.recompiles, self.current)
                if f.path is not None and f.code != recompiles.LIMIT and recompiles.site_of(f.recompiles[-1]) not in tried
                and self.opts.selection.keeps(f.code, self.current[f.path].text, f.line)
            ]
            if not todo:
                return run
            finding = todo[0]
            rc = finding.recompiles[-1]
            tried.add(recompiles.site_of(rc))
            locator, site = Locator(self.current), recompiles.site(finding)
            # proposed and declined as a break site is, so a site left is worded as a break left
            edits = self.propose(site, locator, caps, rc)
            # Read now: the ledger keys a site by its place, which sites of one frame may share.
            why, kept_by, unsafe = self.ledger.no_recipe(self.ledger.key(site)), None, None
            for edit in edits:
                kept = self.recompile_trial(edit, rc, run, locator)
                if kept is not None:
                    run, kept_by = kept, edit.recipe
                    break
                why = f"{self.outcomes[-1].status}: {self.outcomes[-1].detail}"
            else:
                unsafe = None if self.opts.unsafe_fixes else self.unsafe_available(site, locator, caps, rc)
            self.recompile_sites[recompiles.site_of(rc)] = (why, unsafe, kept_by)

    def recompile_left(self, rc: Recompile, hand: str) -> str:
        """What became of a recompile site left (``rc``: its latest recompile), worded as a
        break left is (``left_over``); ``hand``: what a user does about its code."""
        tried, unsafe, kept_by = self.recompile_sites.get(recompiles.site_of(rc), (self.ledger.no_recipe(()), None, None))
        if kept_by:  # it recompiles less, not yet at most once (``recompiles._judged`` says how often)
            return f"the edit kept ({kept_by}) leaves it; by hand: {hand}"
        return self.left_over(tried, unsafe, hand)

    @staticmethod
    def left_over(tried: str, unsafe: str | None, hand: str | None) -> str:
        """Why a site, a break's or a recompile's, is left: fixable with --unsafe-fixes (the
        recipe), else ``tried`` (the verdict of the last edit tried for it, or what the
        recipes that looked said), then what to do by hand."""
        if unsafe:
            return f"{recompiles.UNSAFE} ({unsafe})"
        return tried + (f"; by hand: {hand}" if hand else "")

    def recompile_trial(self, edit: Edit, rc, before: RunResult, locator: Locator) -> RunResult | None:
        """Verify one edit for a recompile site; the run that proves it, or None (rejected)."""
        key = recompiles.site_of(rc)
        result, failure, placed = self.trial([edit], locator)
        status: Status = "applied"
        why = ""
        applied = [o.edit for o in self.outcomes if o.status == "applied"]
        if result is None:
            status, why = "rejected:output-mismatch", failure or ""
        elif len(result.breaks) > len(before.breaks):
            status, why = "rejected:new-break", f"{describe(placed[0]) if placed else 'a break'} is new"
        elif recompiles.counts(result.recompiles)[key] >= recompiles.counts(before.recompiles)[key]:
            status, why = "rejected:no-reduction", f"{rc.function} still recompiles on `{key[3]}`"
        elif diff := self.behaviour_diff(result, _tolerated([*applied, edit])):
            status, why = "rejected:output-mismatch", diff
        elif self.check_own_backend:
            own, why = self.own_trial([edit], locator)
            if own is None:
                status = "rejected:backend"
            elif recompiles.counts(own.recompiles)[key] >= recompiles.counts(before.recompiles)[key]:
                status, why = "rejected:no-reduction", f"on its own backend, {rc.function} still recompiles on `{key[3]}`"
            else:
                self.last_own = result = own
        self.outcomes.append(Outcome(edit, status, why))
        if status != "applied":
            self.ledger.failed(edit, retry=None)
            return None
        self._commit([edit], locator)
        return result

    def prove_zero_recompiles(self, run: RunResult) -> bool:
        """Once each frame recompiles at most once (automatic dynamic shapes) and none hit the
        limit, run the program once more on its own backend, its main block a second time
        under ``torch.compiler.set_stance("fail_on_recompile")``: the first pass is the warm-up."""
        said = "no recompile after warm-up not proven"
        if "fail_on_recompile" not in self.baseline.capabilities:
            self.notes.append(f"{said}: this torch has no torch.compiler.set_stance")
            return False
        per_frame = Counter((rc.file, rc.function) for rc in run.recompiles)
        over = sorted(f"`{fn}` ({n})" for (_, fn), n in per_frame.items() if n > 1)
        if over or recompiles.limited(run.recompiles):
            self.notes.append(f"{said}: recompiles are left beyond the automatic-dynamic one per frame: {', '.join(over) or 'a frame over the limit'}")
            return False
        overlay = {p: s.data for p, s in self.current.items() if s.data != self.originals[p].data}
        self.progress("running the program again, its main block twice, the second under fail_on_recompile")
        try:
            result = self.prober.run(overlay=overlay, backend=self.opts.final_backend, no_recompiles=True)
        except RunFailed as e:
            self.notes.append(f"{said}: the program failed: {e}")
            return False
        if result.recompile_proof:
            self.notes.append(f"{said}: {result.recompile_proof}")
            return False
        self.notes.append(
            'no recompile after warm-up: proven by running the main block again under torch.compiler.set_stance("fail_on_recompile"), on the program\'s own backend'
        )
        return True

    def prove_fullgraph(self, run: RunResult) -> bool:
        """Add ``fullgraph=True`` where the program compiles, proven by a real fullgraph run."""
        if run.breaks:
            self.notes.append(f"fullgraph=True not added: {len(run.breaks)} graph break(s) remain")
            return False
        # The run executed the current generation, so its compile lines are current.
        by_file: dict[Path, set[int]] = {}
        for file, line, _ in run.compile_sites:
            path = Path(os.path.realpath(file))
            if path in self.targets:
                by_file.setdefault(path, set()).add(line)
        locator = Locator(self.current)
        edited = {path: fullgraph.insert(locator.parsed(path), lines) for path, lines in by_file.items()}
        done = [f"{os.path.relpath(p, self.entry.cwd)}:{ln}" for p, (_, lines) in sorted(edited.items()) for ln in sorted(lines)]
        if not done:
            self.notes.append("fullgraph=True not added: no torch.compile call in the targets")
            return False
        overlay = {p: s.data for p, s in self.current.items() if s.data != self.originals[p].data}
        overlay.update({p: data for p, (data, _) in edited.items()})
        tolerate = _tolerated([o.edit for o in self.outcomes if o.status == "applied"])
        result, why = self.own_run(overlay, tolerate, "fullgraph=True")
        if result is None or result.breaks:
            self.notes.append(f"fullgraph=True not added: the fullgraph run failed: {why or 'breaks remain'}")
            return False
        for path, (data, _) in edited.items():
            src = self.current[path]
            self.current[path] = SourceFile(path, data, data.decode(src.encoding), src.encoding)
        self.notes.append(f"fullgraph=True added at {', '.join(done)}, proven by a run with fullgraph=True on the program's own backend")
        return True

    def findings(self, final: RunResult, caps: frozenset[str]) -> list[Finding]:
        """Every break seen (baseline, revealed, remaining) in original coordinates, with its fate."""
        locator = Locator(self.current)
        out: list[Finding] = []
        outside: set[tuple] = set()  # one finding per site: the stacks that reach it may differ
        for brk in self.baseline.breaks:
            if owned_frame(brk, self.targets) is None:
                leaf = brk.leaf
                where = (leaf.file, leaf.line, leaf.col, brk.root.code) if leaf else (None, 0, None, brk.root.code)
                if where in outside:
                    continue
                outside.add(where)
                path = leaf.file if leaf else "?"
                out.append(Finding(None, leaf.line if leaf else 0, None, brk.root.code or "?", message(brk), "outside", f"outside the targets ({path})", brk))
        remaining = {}
        for brk in final.breaks:
            site = locator.site(brk)
            if site is not None:
                remaining[self.ledger.note(site)] = site
        applied = {self.ledger.site_of(o.edit) for o in self.outcomes if o.status == "applied"}
        fixed_any = bool(applied)
        reasons = {self.ledger.site_of(o.edit): f"{o.status}: {o.detail}" for o in self.outcomes if o.status != "applied"}
        for key, finding in self.ledger.seen.items():
            if key not in remaining and (key in applied or fixed_any):
                status, detail = "fixed", ""  # by its own edit, or by one that contained it
            else:
                site = remaining.get(key)
                unsafe = self.unsafe_available(site, locator, caps) if site and not self.opts.unsafe_fixes else None
                status = "fixable-unsafe" if unsafe else "unfixed"
                tried = reasons.get(key, self.ledger.no_recipe(key))
                detail = self.left_over(tried, unsafe, escape.hatch_at(finding.brk, self.targets) if finding.brk is not None else None)
            out.append(replace(finding, status=status, detail=detail))
        return sorted(out, key=lambda f: (str(f.path or ""), f.line, f.col or 0))


@dataclass(frozen=True)
class _Checkpoint:
    """A round whose own-backend check was deferred: its edits, and the session's state
    before it committed them (to go back to when they fail on the own backend)."""

    number: int
    started: RunResult  # the run the round started from
    accepted: list[Edit]
    locator: Locator  # the generation the edits were computed on
    current: dict[Path, SourceFile]
    outcomes: int  # how many outcomes there were at the round's end
    ledger: Snapshot


@dataclass
class _Round:
    """The sites of one round and the lookups its verdicts need."""

    locator: Locator
    targets: set[Path]
    sites: dict[tuple, Site] = field(default_factory=dict)
    revealed: set[tuple] = field(default_factory=set)  # (path, line, code) of breaks in accepted trials
    present: set[tuple] | None = None  # the same, of the latest accepted trial: what still breaks

    def codes_in(self, edit: Edit) -> set[str]:
        """Codes that broke inside the edit's span or on its site's line before it (besides its own site)."""
        (l1, _), (l2, _) = edit.start, edit.end
        return {
            s.code
            for s in self.sites.values()
            if s.path == edit.path and (l1 <= s.line <= l2 or s.line == edit.site.line) and s is not edit.site
        }

    def leaves(self) -> frozenset[tuple[str, int]]:
        """The library lines this round's sites broke at, behind a line of the targets."""
        return frozenset(leaf for s in self.sites.values() if (leaf := library_leaf(s.brk, s.path)) is not None)

    def elsewhere(self, placed: list[TrialBreak], edits: list[Edit]) -> TrialBreak | None:
        """A break of the trial on a line where none of this round's sites broke and
        no local edit's span contains: what a process-wide change (a config route)
        moved the break to, e.g. from `int(t)` to the `if` on its value. A line that
        broke already and still breaks, in another form, is no new break."""
        known = {(s.path, s.line) for s in self.sites.values()} | {(p, line) for p, line, _ in self.revealed}
        for tb in placed:
            if tb.at.rewritten or (tb.path, tb.at.line) in known:
                continue
            if any(e.path == tb.path and e.start[0] <= tb.at.line <= e.end[0] for e in edits if not _is_global(e)):
                continue
            return tb
        return None

    def moved_anywhere(self, placed: list[TrialBreak]) -> list[TrialBreak]:
        """The trial's breaks on lines where none of this round's sites broke: where a
        process-wide setting moved its breaks (one per site line)."""
        known = {(s.path, s.line) for s in self.sites.values()} | {(p, line) for p, line, _ in self.revealed}
        out: dict[tuple, TrialBreak] = {}
        for tb in placed:
            if not tb.at.rewritten and (tb.path, tb.at.line) not in known:
                out.setdefault((tb.path, tb.at.line), tb)
        return list(out.values())

    def moved_to(self, placed: list[TrialBreak], edit: Edit) -> list[TrialBreak]:
        """The trial's breaks in the function of ``edit``'s site (in the current generation's
        lines) where nothing broke before: where an edit moved its site's break. A line the
        edit rewrote counts when it breaks with a code its span did not break with."""
        parsed = self.locator.parsed(edit.site.path)
        outer = [a for a in parsed.ancestors(self.locator.node(edit.site)) if isinstance(a, cst.FunctionDef)]
        if not outer:
            return []
        (first, _), (last, _) = parsed.span(outer[-1])
        known = {(s.path, s.line) for s in self.sites.values()}
        codes = self.codes_in(edit)
        return [
            tb for tb in placed
            if tb.path == edit.site.path and first <= tb.at.line <= last
            and (tb.code not in codes if tb.at.rewritten else (tb.path, tb.at.line) not in known)
        ]

    def byte_col(self, site: Site) -> int | None:
        owned = owned_frame(site.brk, self.targets)
        return owned[1].col if owned else None


def runs_note(entry: Entry, runs: int, baseline: RunResult) -> str:
    """What gbfix ran, where, and what the program wrote while it ran."""
    said = f"ran `{entry.text}` {runs} time(s) in {entry.cwd}"
    if not baseline.wrote:
        return f"{said}; it wrote no file outside the temporary folder and caches"
    shown = [os.path.relpath(p, entry.cwd) for p in baseline.wrote[:5]]
    rest = len(baseline.wrote) - len(shown)
    more = f" and {rest}{'+' if baseline.wrote_more else ''} more" if rest or baseline.wrote_more else ""
    return f"{said}, one run at a time since it writes files ({', '.join(shown)}{more}), which each run wrote again"


def _is_global(edit: Edit) -> bool:
    """The edit changes the whole process (a config route), not just its span."""
    return any(recipes.named(r).process_wide for r in edit.recipes)


def _edit_identity(edit: Edit) -> tuple:
    """Edits with the same identity make the same change to the file."""
    return (edit.path, edit.start, edit.end, edit.recipe, edit_ops.code_of(edit))


def _alone(edit: Edit) -> bool:
    """The edit is tried on its own (not only joined with the fix of where its break moves)."""
    return bool(edit.also) or recipes.named(edit.recipe).alone


def _tolerated(edits: list[Edit]) -> frozenset[str]:
    """What the verifier lets these edits change (see ``verify.behaviour_diff``)."""
    return frozenset().union(*(recipes.named(r).tolerates for e in edits for r in e.recipes))


def fix(
    paths: list[Path],
    entry: Entry,
    opts: Options = Options(),
    progress: Callable[[str], None] = lambda _: None,
    cache: bool = False,
    worker: Warm | Lease | None = None,
) -> Result:
    """Find the breaks the entry hits in the target paths and compute verified edits.

    ``cache``: reuse the result of an earlier run on the same code, and file this one.
    ``worker``: the warm worker to run the entry in (``detect.warm_worker``), already
    booting; else one starts with the first run.
    """
    targets = sources.collect(paths)
    # The generated modules on disk that edits of the targets may extend, where not
    # targets themselves: part of the cache's key, and diffed and written as the
    # files they are (each only if unchanged since read), not as new files.
    extended = {p: sources.read(p) for p in sorted(generated.homes(targets)) if p not in targets}

    def run() -> Result:
        with scratch.folder() as workdir:
            session = _Session(entry, targets, opts, workdir, progress, worker)
            try:
                return session.run()
            finally:
                session.prober.close()

    result, reused = result_cache.reuse_or_run(
        result_cache.key(entry, opts, {**targets, **extended}) if cache else None,
        Result,
        run,
        _loaded,
        {**targets, **extended},
    )
    if extended:
        result = replace(result, originals={**extended, **result.originals})
    if not reused:
        return result
    progress("unchanged since an earlier run: reusing its verified result")
    # This run ran nothing: the earlier run's count of runs is not this one's.
    notes = [n for n in result.notes if n != runs_note(result.entry, result.runs, result.baseline)]
    return replace(result, runs=0, seconds=0.0, notes=(*notes, result_cache.REUSED.format(what="verified result")))


def _loaded(result: Result) -> list[str]:
    """The files the result's runs loaded, but for the new files it holds (a package's
    generated module, read from the overlay, not from disk)."""
    new = {str(p) for p in result.fixed if p not in result.originals}
    runs = (*result.baseline.sources, *(result.final.sources if result.final else ()))
    return [f for f in runs if os.path.realpath(f) not in new]


def write(result: Result) -> list[Path]:
    """Write the verified edits: every file or none, each only if unchanged since it was read."""
    return writes.write_all([(result.originals.get(path, path), new) for path, new in sorted(result.fixed.items())])
