"""The command line: a thin printer over the engine, the linter and the catalog.

``gbfix [fix options] PATHS`` runs the default command, ``fix``; ``gbfix explain CODE``
and ``gbfix lint PATHS`` are the other commands. Modules are imported inside the commands
that need them: ``lint`` and ``explain`` never import torch, and ``lint`` not even
libcst, so that it starts fast enough to run on every commit.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import click

from gbfix.errors import GbfixError

_HELP = {"help_option_names": ["-h", "--help"]}


class _DefaultGroup(click.Group):
    """A group whose first argument, when it is not a command name, goes to ``fix``.

    So ``gbfix --dry-run -e "python t.py" src/`` and ``gbfix src/`` keep working;
    ``gbfix fix lint`` fixes a folder named ``lint``.
    """

    default = "fix"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help", "--version")):
            args = [self.default, *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        prog = ctx.command_path
        formatter.write_usage(prog, "[fix] [OPTIONS] [PATHS]...")
        for name in self.list_commands(ctx):
            if name != self.default:
                cmd = self.commands[name]
                formatter.write_text(f"{' ' * len('Usage: ')}{prog} {name} {' '.join(cmd.collect_usage_pieces(ctx))}")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        fix_cmd = self.commands[self.default]
        records = [r for p in fix_cmd.get_params(ctx) if p.name != "help" and (r := p.get_help_record(ctx))]
        with formatter.section("Options (fix, the default command)"):
            formatter.write_dl(records)
        self.format_commands(ctx, formatter)
        own = [r for p in self.get_params(ctx) if (r := p.get_help_record(ctx))]
        with formatter.section("Other options"):
            formatter.write_dl(own)


@click.group(cls=_DefaultGroup, context_settings=_HELP)
@click.version_option(package_name="gbfix")
def cli() -> None:
    """Find torch.compile graph breaks in PATHS, rewrite the code to remove them, prove each rewrite.

    Without a command gbfix runs `fix`; name it (`gbfix fix lint`) to fix a path called
    like a command. Exit codes: 0 nothing left to fix, 1 breaks found or edits to make, 2 error.
    """


def _progress(quiet: bool):
    started = time.perf_counter()

    def say(message: str) -> None:
        if not quiet:
            click.echo(f"gbfix [{time.perf_counter() - started:5.1f}s] {message}", err=True)

    return say


def _codes(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...] | None:
    """--select / --ignore: comma-separated, repeatable; None when not given (the config decides)."""
    from gbfix.suppress import parse_selectors

    if not values:
        return None
    try:
        return parse_selectors([c for v in values for c in v.split(",") if c.strip()])
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def selection_options(f):
    """--select and --ignore, for every command that reports graph breaks."""
    f = click.option("--ignore", multiple=True, callback=_codes, metavar="CODES",
                     help="Codes not to report or fix: GB0059, a prefix (GB01) or ALL; comma-separated, repeatable. Replaces `ignore` of [tool.gbfix].")(f)
    return click.option("--select", multiple=True, callback=_codes, metavar="CODES",
                        help="Codes to report and fix (default ALL): GB0059, a prefix (GB01) or ALL; comma-separated, repeatable. Replaces `select` of [tool.gbfix].")(f)


OUTPUT_FORMAT = click.option(
    "--output-format", "--format", "fmt", type=click.Choice(["text", "json", "github", "sarif"]), default="text", show_default=True,
    help="text; json (a stable document); github (workflow annotations); sarif (SARIF 2.1.0, for code scanning).",
)


def _html_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """--html FILE: checked before anything runs (its folder must exist)."""
    if value is not None and not value.parent.is_dir():
        raise click.BadParameter(f"{value}: no such folder {str(value.parent)!r}")
    return value


HTML_OPTION = click.option(
    "--html", "html_file", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path), callback=_html_path,
    help="Also write a self-contained HTML report: each break, its source, the edits tried and their verdicts, counts before and after.",
)
NO_CACHE = click.option(
    "--no-cache", is_flag=True, envvar="GBFIX_NO_CACHE",
    help="Run the program even if it and the files it loads are unchanged since an earlier run (env GBFIX_NO_CACHE=1).",
)
_TIMEOUT = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds one run of the entry may take (default 900).")
_ENTRY = click.option("-e", "--entry", help="What to run: 'script.py ARGS', 'python -m pkg.mod ARGS' or 'pytest ARGS'.")
_UNSAFE = click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also try fixes that may change behaviour (still verified).")
_FULLGRAPH = click.option(
    "--fullgraph/--no-fullgraph", default=None, help="Aim for zero breaks; then add fullgraph=True where the program compiles, proven by a real run."
)
_ZERO_RECOMPILES = click.option(
    "--zero-recompiles/--no-zero-recompiles", default=None,
    help="Once each compiled frame recompiles at most once, prove that, warm, it compiles nothing again: the main block runs twice, the second time under torch.compiler.set_stance('fail_on_recompile').",
)
_BACKEND = click.option(
    "--backend", type=click.Choice(["own", "eager", "inductor"]), default=None,
    help="Backend of the final check of the edits: the program's own (default), eager, or inductor.",
)


def _settings_options(f):
    """The flags that override [tool.gbfix] for `fix` (and `config`, which shows the result)."""
    for option in (selection_options, _BACKEND, _ZERO_RECOMPILES, _FULLGRAPH, _UNSAFE, _TIMEOUT, _ENTRY):
        f = option(f)
    return f


def _flags(entry, timeout, unsafe_fixes, fullgraph, zero_recompiles, backend, select, ignore) -> dict:
    """The settings flags by their [tool.gbfix] key (None: not given)."""
    return {
        "entry": entry, "timeout": timeout, "unsafe-fixes": unsafe_fixes, "fullgraph": fullgraph, "zero-recompiles": zero_recompiles,
        "backend": backend, "select": select, "ignore": ignore,
    }


@cli.command(context_settings=_HELP, short_help="Detect, fix and verify graph breaks (the default command).")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--dry-run", "mode", flag_value="dry-run", default=True, help="Show the verified diff; write nothing (default).")
@click.option("--apply", "mode", flag_value="apply", help="Write the verified edits.")
@_settings_options
@OUTPUT_FORMAT
@HTML_OPTION
@NO_CACHE
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def fix(
    paths: tuple[Path, ...], mode: str, entry: str | None, timeout: float | None, unsafe_fixes: bool | None, fullgraph: bool | None,
    zero_recompiles: bool | None, backend: str | None, select: tuple[str, ...] | None, ignore: tuple[str, ...] | None, fmt: str,
    html_file: Path | None, no_cache: bool, quiet: bool,
) -> None:
    """Run the entry, find its graph breaks in PATHS, and fix them with verified edits (the default command).

    PATHS are the files and folders gbfix may edit (default: `targets` of [tool.gbfix], else
    the current folder). Exit codes: 0 nothing left to fix, 1 breaks found or edits to make, 2 error.
    """
    from gbfix.config import resolve as settings_for
    from gbfix.detect import warm_worker
    from gbfix.entry import resolve
    from gbfix.folder_lock import hold
    from gbfix.sources import check_paths
    from gbfix.suppress import Filter

    if paths:
        check_paths(list(paths))  # a missing path is the first thing to say, before the entry or the config
    settings = settings_for(paths, _flags(entry, timeout, unsafe_fixes, fullgraph, zero_recompiles, backend, select, ignore))
    targets = settings.targets()
    check_paths(targets)
    if mode == "apply":
        from gbfix.writes import check_targets

        check_targets(targets)  # before the entry runs: a file --apply may not write is said first
    the_entry = resolve(entry, targets, Path.cwd())
    hold(the_entry.cwd)  # before the worker starts: a second gbfix on this program stops here
    # The worker imports torch while gbfix imports LibCST and the engine (stopped unused
    # when a cached result is reused).
    worker = warm_worker(the_entry, settings["timeout"])
    try:
        from gbfix import engine, formats, report  # libcst and the engine: only for this command

        opts = engine.Options(
            unsafe_fixes=settings["unsafe-fixes"],
            timeout=settings["timeout"],
            fullgraph=settings["fullgraph"],
            selection=Filter(settings["select"], settings["ignore"]),
            backend=settings["backend"],
            zero_recompiles=settings["zero-recompiles"],
        )
        fixed = engine.fix(targets, the_entry, opts, _progress(quiet), cache=not no_cache, worker=worker)
    finally:
        if worker is not None:
            worker.close()
    result, suppressed = report.filtered(fixed, opts.selection)
    applied = mode == "apply"
    if fmt == "text":
        for finding in result.findings:
            click.echo(report.diagnostic(finding))
        if result.fixed and not applied:
            click.echo(result.diff(report.display_path), nl=False)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    written = engine.write(result) if applied else []
    for path in written:
        click.echo(f"wrote {report.display_path(path)}", err=True)
    summary, code = report.summary(result, applied, suppressed=suppressed), report.exit_code(result, applied)
    if fmt != "text":
        doc = formats.fix_document(
            result, applied=applied, summary=summary, exit_code=code, suppressed=suppressed, display=report.display_path, written=written
        )
        click.echo(formats.render(fmt, doc), nl=False)
    if html_file is not None:
        from gbfix import html_report

        page = html_report.render(result, command="fix", applied=applied, summary=summary, suppressed=suppressed)
        html_report.write(html_file, page)
        click.echo(f"wrote the HTML report {report.display_path(html_file.resolve())}", err=True)
    click.echo(summary, err=True)
    sys.exit(code)


_FORMAT = click.option(
    "--output-format", "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)


@cli.command(context_settings=_HELP, short_help="Explain a GB code: registry entry, catalog page, recipes.")
@click.argument("code")
@_FORMAT
def explain(code: str, fmt: str) -> None:
    """Explain a graph break code (GB0170, gb0170 or 170): the installed torch's registry
    entry, and gbfix's catalog page with its recipes and before/after examples. Offline."""
    from gbfix import explain as ex

    e = ex.explain(code)
    click.echo(json.dumps(ex.as_json(e), indent=2) if fmt == "json" else ex.render(e))


@cli.command(context_settings=_HELP, short_help="Static check for likely graph breaks (no torch import).")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@selection_options
@OUTPUT_FORMAT
def lint(paths: tuple[Path, ...], select: tuple[str, ...] | None, ignore: tuple[str, ...] | None, fmt: str) -> None:
    """Statically find likely graph breaks in code reached from torch.compile (no torch, nothing run).

    PATHS are files and folders (default: `targets` of [tool.gbfix], else the current folder);
    include the files that call torch.compile. Prints `path:line:col: GBxxxx likely: message`;
    exit 1 when anything is found (syntax errors are reported as E999), 0 when nothing, 2 on errors.
    """
    from gbfix.config import resolve as settings_for
    from gbfix.lint import lint as run_lint
    from gbfix.suppress import Filter

    settings = settings_for(paths, {"select": select, "ignore": ignore})
    result = run_lint(settings.targets(), selection=Filter(settings["select"], settings["ignore"]))
    code = 1 if result.findings else 0
    if fmt == "text":
        for f in result.findings:
            click.echo(f.render())
    else:
        from gbfix import formats

        doc = formats.lint_document(result, summary=result.summary(), exit_code=code, suppressed=result.suppressed)
        click.echo(formats.render(fmt, doc), nl=False)
    click.echo(result.summary(), err=True)
    sys.exit(code)


@cli.command("config", context_settings=_HELP, short_help="Show the settings gbfix resolves: flags, [tool.gbfix], defaults.")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@_settings_options
@_FORMAT
def config_command(
    path: Path | None, entry: str | None, timeout: float | None, unsafe_fixes: bool | None, fullgraph: bool | None,
    zero_recompiles: bool | None, backend: str | None, select: tuple[str, ...] | None, ignore: tuple[str, ...] | None, fmt: str,
) -> None:
    """Print each setting `gbfix PATH` would use, its value and where it came from (a flag,
    the pyproject.toml of [tool.gbfix], or the default). The same flags as `fix` override."""
    from gbfix.config import display
    from gbfix.config import resolve as settings_for
    from gbfix.sources import check_paths

    paths = (path,) if path is not None else ()
    check_paths(list(paths))
    settings = settings_for(paths, _flags(entry, timeout, unsafe_fixes, fullgraph, zero_recompiles, backend, select, ignore))
    where = display(settings.config.path, Path.cwd()) if settings.config else None
    values = {key: {"value": list(s.value) if isinstance(s.value, tuple) else s.value, "source": s.source, "origin": s.origin}
              for key, s in settings.values.items()}
    if fmt == "json":
        click.echo(json.dumps({"config": where, "settings": values}, indent=2))
        return
    click.echo(f"# [tool.gbfix] from {where}" if where else "# no [tool.gbfix] in a pyproject.toml here or above: flags and defaults")
    width = max(map(len, values))
    for key, v in values.items():
        shown = "(not set)" if v["value"] is None else json.dumps(v["value"])
        click.echo(f"{key:<{width}} = {shown:<24} # {v['origin']}")


@cli.command(context_settings=_HELP, short_help="CI gate: fail on graph breaks not in the baseline (one run, no fixing).")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@_ENTRY
@_TIMEOUT
@selection_options
@click.option(
    "--baseline", "baseline_file", type=click.Path(dir_okay=False, path_type=Path),
    help="The baseline file (default: .gbfix-baseline.json next to pyproject.toml, else in the current folder).",
)
@click.option("--update-baseline", is_flag=True, help="Write the breaks found now to the baseline and exit 0.")
@OUTPUT_FORMAT
@HTML_OPTION
@NO_CACHE
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def check(
    paths: tuple[Path, ...], entry: str | None, timeout: float | None, select: tuple[str, ...] | None, ignore: tuple[str, ...] | None,
    baseline_file: Path | None, update_baseline: bool, fmt: str, html_file: Path | None, no_cache: bool, quiet: bool,
) -> None:
    """Run the entry once and fail on graph breaks in PATHS that the baseline does not list (nothing is fixed).

    Breaks are keyed by GB code, file and enclosing function, with a count, not by line.
    PATHS default to `targets` of [tool.gbfix], else the current folder.
    Exit codes: 0 no new breaks (or --update-baseline), 1 new breaks, 2 error.
    """
    from gbfix import check as gate  # the engine and torch: only for this command

    flags = {"entry": entry, "timeout": timeout, "select": select, "ignore": ignore}
    sys.exit(gate.main(
        list(paths), flags, baseline_file, update_baseline, _progress(quiet), fmt=fmt, html_file=html_file, cache=not no_cache
    ))


class _Terminated(BaseException):
    """SIGTERM, raised where gbfix is: it unwinds as Ctrl-C does, so the runs are stopped,
    a write in progress is put back and the scratch folder is removed."""


def _terminate(signum, frame) -> None:
    raise _Terminated


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        cli.main(prog_name="gbfix", standalone_mode=False)  # also under `python -m gbfix`
    except click.exceptions.Abort:
        click.echo("gbfix: interrupted", err=True)
        sys.exit(130)
    except _Terminated:
        click.echo("gbfix: terminated", err=True)
        sys.exit(143)
    except click.ClickException as e:
        click.echo(f"gbfix: error: {e.format_message()}", err=True)
        sys.exit(2)
    except GbfixError as e:
        click.echo(f"gbfix: error: {e}", err=True)
        sys.exit(2)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - one line, never a traceback (GBFIX_DEBUG=1 shows it)
        if os.environ.get("GBFIX_DEBUG"):
            raise
        click.echo(f"gbfix: internal error: {type(e).__name__}: {e}", err=True)
        sys.exit(2)
