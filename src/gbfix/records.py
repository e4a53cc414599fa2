"""The records that flow between gbfix's stages: detect -> locate -> recipes -> verify -> report.

All are frozen: a stage never mutates what an earlier stage produced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Safety = Literal["safe", "unsafe"]


@dataclass(frozen=True)
class Frame:
    """One frame of a break's user stack, as Dynamo reported it.

    ``col``/``end_col`` are 0-based UTF-8 *byte* offsets on ``line`` (what
    ``co_positions`` gives); ``None`` when Dynamo had no position.
    """

    file: str
    line: int
    col: int | None
    end_col: int | None
    name: str

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Frame:
        return cls(d["file"], d["line"], d.get("col"), d.get("end_col"), d.get("name", ""))


@dataclass(frozen=True)
class Cause:
    """One graph break in a chain (``*** While handling this graph break ...``)."""

    code: str | None
    gb_type: str
    explanation: str
    hints: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Cause:
        return cls(d.get("code"), d["gb_type"], d.get("explanation", ""), tuple(d.get("hints", ())))


@dataclass(frozen=True)
class Break:
    """A graph break as recorded in the child process.

    ``causes`` is the chain, outermost report first: for a break inside a loop
    that is ``(GB7000 graph break in loop, GB0059 print)``. The last one is the
    root cause, the one a recipe has to fix.
    """

    causes: tuple[Cause, ...]
    stack: tuple[Frame, ...]  # outermost first
    compile_id: str | None = None
    frame_skipped: bool = False

    @property
    def top(self) -> Cause:
        return self.causes[0]

    @property
    def root(self) -> Cause:
        return self.causes[-1]

    @property
    def code(self) -> str | None:
        return self.top.code

    @property
    def leaf(self) -> Frame | None:
        return self.stack[-1] if self.stack else None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Break:
        return cls(
            causes=tuple(Cause.from_json(c) for c in d["causes"]),
            stack=tuple(Frame.from_json(f) for f in d["stack"]),
            compile_id=d.get("compile_id"),
            frame_skipped=d.get("frame_skipped", False),
        )


@dataclass(frozen=True)
class Guard:
    """One guard whose failure made Dynamo compile a frame again, as Dynamo wrote it
    (``self.calls == 1``, ``lr == 0.1``, ``tensor 'x' size mismatch at index 0. expected 2,
    actual 3``), with the user stack that created it (outermost first; empty where
    Dynamo kept none, as for a tensor's size)."""

    text: str
    stack: tuple[Frame, ...] = ()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Guard:
        return cls(d["text"], tuple(Frame.from_json(f) for f in d.get("stack", ())))


@dataclass(frozen=True)
class Recompile:
    """One recompile of a compiled frame (``gbfix.recompiles`` says why, in RC codes).

    ``guards``: the failed guards, one per earlier compile of the frame, the most
    recent first (repeats left out); ``stack``: the user stack that called the frame;
    ``limit``: e.g. ``"recompile_limit (8)"`` when this attempt hit Dynamo's limit, so
    the frame runs eagerly from then on.
    """

    function: str
    file: str
    line: int  # the first line of the frame's code (its def)
    compile_id: str | None
    guards: tuple[Guard, ...]
    stack: tuple[Frame, ...] = ()
    limit: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Recompile:
        return cls(
            d["function"],
            d["file"],
            d["line"],
            d.get("compile_id"),
            tuple(Guard.from_json(g) for g in d.get("guards", ())),
            tuple(Frame.from_json(f) for f in d.get("stack", ())),
            d.get("limit"),
        )


@dataclass(frozen=True)
class LogRecord:
    logger: str
    level: str
    message: str


@dataclass(frozen=True)
class WarningRecord:
    category: str
    message: str


@dataclass(frozen=True)
class ValueSpec:
    """What one argument or return value of an observed call looked like.

    ``kind``: "tensor", "int", "float", "bool", "str", "none", "tuple", "list",
    "module" (an nn.Module) or "other" (``type_name`` says which).
    """

    kind: str
    shape: tuple[int, ...] | None = None  # tensor
    dtype: str | None = None  # tensor, e.g. "torch.float32"
    device: str | None = None  # tensor, e.g. "cpu"
    requires_grad: bool = False  # tensor
    items: tuple[ValueSpec, ...] = ()  # tuple / list
    value: Any = None  # int / float / bool / str: the value itself
    type_name: str = ""  # the Python type's qualified name

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ValueSpec:
        return cls(
            d["kind"],
            tuple(d["shape"]) if d.get("shape") is not None else None,
            d.get("dtype"),
            d.get("device"),
            d.get("requires_grad", False),
            tuple(cls.from_json(i) for i in d.get("items", ())),
            d.get("value"),
            d.get("type_name", ""),
        )


@dataclass(frozen=True)
class ObservedCall:
    """One call of a user function in an uncompiled run: its bound arguments and result."""

    args: tuple[tuple[str, ValueSpec], ...]  # parameter name -> value, in signature order
    result: ValueSpec

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ObservedCall:
        return cls(tuple((n, ValueSpec.from_json(v)) for n, v in d["args"]), ValueSpec.from_json(d["result"]))


@dataclass(frozen=True)
class RunResult:
    """What one run of the entry in the child produced."""

    breaks: tuple[Break, ...]
    stdout: str
    logs: tuple[LogRecord, ...]
    warnings: tuple[WarningRecord, ...]
    compiled_calls: int
    outputs_path: Path
    # Set when the run compared its outputs to an earlier run's: None = equal.
    output_mismatch: str | None
    # (file, line, uses the eager backend anyway) of each torch.compile call
    compile_sites: tuple[tuple[str, int, bool], ...]
    torch_version: str
    capabilities: frozenset[str]
    seconds: float
    # Calls of the functions the run was asked to observe, by (file, first line of the def)
    observed: dict[tuple[str, int], tuple[ObservedCall, ...]] = field(default_factory=dict)
    # Graphs Dynamo handed to a backend (its counters["stats"]["unique_graphs"]; recompiles
    # included); None when the torch has no such counter
    graphs: int | None = None
    # The user's Python files the run loaded (absolute): what the run's outcome depends on
    sources: tuple[str, ...] = ()
    # Files the program wrote, renamed or removed (absolute; caches and scratch space left
    # out), in the order first written; ``wrote_more``: more than the child lists
    wrote: tuple[str, ...] = ()
    wrote_more: bool = False
    # Every recompile of a compiled frame, in the order Dynamo compiled them; notes: what this
    # torch could not tell (a private hook missing)
    recompiles: tuple[Recompile, ...] = ()
    recompile_notes: tuple[str, ...] = ()
    # With ``no_recompiles``: "" when the second pass under fail_on_recompile compiled nothing,
    # else why not (the recompile that failed it, or why it could not run); None: not asked.
    recompile_proof: str | None = None
    # A baseline only: why the program failed under torch.compile, where it runs without it
    # (this run is that uncompiled one, with the breaks the compiled run saw before it failed).
    compile_failure: str | None = None


@dataclass(frozen=True)
class Site:
    """A break attributed to a span in one of the target files.

    ``line`` is 1-based, ``col``/``end_col`` 0-based *character* columns
    (LibCST's convention); ``end_col`` is None when Dynamo gave no span.
    """

    path: Path
    line: int
    col: int | None
    end_col: int | None
    brk: Break

    @property
    def code(self) -> str:
        return self.brk.root.code or self.brk.root.gb_type


@dataclass(frozen=True)
class Edit:
    """A recipe's proposed rewrite of one node of a target file."""

    id: int
    site: Site
    recipe: str
    safety: Safety
    message: str
    start: tuple[int, int]  # (line, col) of the replaced node in the original file
    end: tuple[int, int]
    # The original node and its replacement; identity of `original` ties the
    # edit to the parsed module it was computed from.
    original: Any = field(compare=False, repr=False)
    replacement: Any = field(compare=False, repr=False)
    imports: tuple[tuple[str, str | None], ...] = ()  # (module, name) for AddImportsVisitor
    helpers: tuple[tuple[str, str], ...] = ()  # (name, code) of module-level helpers to add
    # The file the edit changes when it is not its site's: a process-wide setting
    # for a break in an imported module goes into the entry script.
    file: Path | None = None
    # A compound edit (``gbfix.compound``): the recipes of the follow-up edits merged into it.
    also: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return self.file or self.site.path

    @property
    def recipes(self) -> tuple[str, ...]:
        """Every recipe the edit carries out: its own, then a compound edit's follow-ups."""
        return (self.recipe, *self.also)

    def overlaps(self, other: Edit) -> bool:
        return self.path == other.path and not (
            self.end <= other.start or other.end <= self.start
        )


Status = Literal[
    "applied",
    "rejected:no-reduction",
    "rejected:new-break",
    "rejected:output-mismatch",
    "rejected:backend",
    "deferred:overlap",
    "skipped:unsafe",
]


@dataclass(frozen=True)
class Outcome:
    edit: Edit
    status: Status
    detail: str = ""
