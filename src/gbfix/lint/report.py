"""What ``gbfix lint`` found: the findings and the one-line summary."""

from __future__ import annotations

from dataclasses import dataclass, field

# The notice that opens the summary when the project has no compile call (said once, on stderr)
ASSUMED = "No torch.compile call found in the project, so the forward of each nn.Module in the files checked is taken as compiled."


@dataclass(frozen=True, order=True)
class Finding:
    path: str  # as displayed: relative to the current folder when under it
    line: int  # 1-based
    col: int  # 1-based, in characters
    code: str  # GBxxxx, or E999 (syntax error) / E902 (unreadable file)
    message: str
    via: str = ""  # the compiled region it was reached from ("Net.forward, assumed compiled" without a compile call)

    def render(self) -> str:
        if self.code.startswith("E"):
            return f"{self.path}:{self.line}:{self.col}: {self.code} {self.message}"
        via = f" (via {self.via})" if self.via else ""
        return f"{self.path}:{self.line}:{self.col}: {self.code} likely: {self.message}{via}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    files: int = 0  # the files given, the only ones findings are reported in
    project_files: int = 0  # the files searched for compile calls (the given ones included)
    regions: list[str] = field(default_factory=list)  # "Net.forward (train.py:12)": those reaching the files given
    assumed: bool = False  # no compile call anywhere: the regions are nn.Module forwards
    suppressed: int = 0  # findings a `# gbfix: ignore` comment silenced (not listed)

    def summary(self) -> str:
        breaks = [f for f in self.findings if f.code.startswith("GB")]
        errors = len(self.findings) - len(breaks)
        checked = f"{self.files} file{'s' if self.files != 1 else ''} checked"
        regions = f"{len(self.regions)} compiled region{'s' if len(self.regions) != 1 else ''}"
        if breaks:
            files = len({f.path for f in breaks})
            noun = "graph break" if len(breaks) == 1 else "graph breaks"
            line = f"{len(breaks)} likely {noun} in {files} file{'s' if files != 1 else ''} ({checked}, {regions})."
        elif self.regions:
            line = f"No likely graph breaks ({checked}, {regions})."
        else:
            project = f"the project ({self.project_files} file{'s' if self.project_files != 1 else ''})"
            why = f"no torch.compile call in {project} and no nn.Module forward here" if self.assumed else f"no torch.compile call in {project} reaches them"
            line = f"No compiled code found ({checked}): {why}."
        if self.assumed and self.regions:
            line = f"{ASSUMED} {line}"
        if errors:
            line += f" {errors} file{'s' if errors != 1 else ''} could not be parsed."
        if self.suppressed:
            line += f" {self.suppressed} suppressed."
        return line
