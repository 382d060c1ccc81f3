"""The command line: a thin click layer over `spikeforensics.api`.

Machine-readable output goes to stdout (`--format json` where a command has it);
progress, warnings and errors go to stderr. Exit codes (CONTRACT.md): 0 success,
1 input could not be used, 2 usage error, 3 incidents at or above `--fail-on`, 4 internal
error (a bug: a detector or stage failed, so the diagnosis is `incomplete`).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback

import click

from spikeforensics import __version__

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
EXIT_INPUT, EXIT_USAGE, EXIT_INCIDENTS, EXIT_INTERNAL = 1, 2, 3, 4
EPILOG = (
    "Exit codes: 0 success, 1 input could not be used, 2 usage error, 3 incidents at or above --fail-on, "
    "4 internal error (a bug in spikeforensics, or an incomplete diagnosis)."
)
EPILOG_PLAIN = (
    "Exit codes: 0 success, 1 input could not be used, 2 usage error, 4 internal error (a bug in spikeforensics)."
)


class InputError(click.ClickException):
    exit_code = EXIT_INPUT

    def show(self, file=None) -> None:
        click.echo(f"spikeforensics: error: {self.message}", err=True)


class InternalError(InputError):
    exit_code = EXIT_INTERNAL


def _color_enabled() -> bool | None:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return None  # click decides (off when not a terminal)


def warn(message: str) -> None:
    click.echo(click.style("warning: ", fg="yellow") + _plain(message), err=True, color=_color_enabled())


def note(message: str, quiet: bool = False) -> None:
    if not quiet:
        click.echo(_plain(message), err=True, color=_color_enabled())


def say(text: str) -> None:
    """Human-readable output on stdout, input-derived parts made terminal-safe (lines kept)."""
    from spikeforensics.ingest.base import strip_controls

    click.echo(strip_controls(text, keep_newlines=True))


def handle_errors(func):
    """Turn library errors into one-line messages and the contract's exit codes."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from spikeforensics.ingest import IngestError
        from spikeforensics.store import StoreError

        debug = kwargs.get("debug") or os.environ.get("SPIKEFORENSICS_DEBUG")
        try:
            return func(*args, **kwargs)
        except OSError as exc:  # the environment (a store or output path that cannot be written): exit 1
            if debug:
                traceback.print_exc()
            raise InputError(_os_error_line(exc, kwargs.get("store"))) from None
        except (IngestError, StoreError, ValueError) as exc:  # bad input or environment: exit 1
            if debug:
                traceback.print_exc()
            raise InputError(_plain(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__) from None
        except KeyboardInterrupt:
            click.echo("spikeforensics: interrupted; the store is unchanged by the unfinished file", err=True)
            sys.exit(130)
        except click.ClickException:
            raise
        except Exception as exc:  # a bug: one line, full trace only with --debug, exit 4
            if debug:
                traceback.print_exc()
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise InternalError(
                f"internal error (a bug in spikeforensics, not in your input): {type(exc).__name__}: "
                f"{first}" + ("" if debug else " (re-run with --debug for the traceback)")
            ) from None

    return wrapper


def _os_error_line(exc: OSError, store) -> str:
    """One line for an OSError: a path inside the store is named as a store error."""
    from pathlib import Path

    from spikeforensics.store import resolve_store, store_os_error

    if exc.filename:
        root = resolve_store(store)
        try:
            inside = Path(exc.filename).resolve().is_relative_to(root.resolve())
        except (OSError, ValueError):
            inside = False
        if inside:
            return str(store_os_error(exc, root, "write"))
        return _plain(f"{exc.filename}: {exc.strerror or exc}")
    return _plain(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def _plain(text: str) -> str:
    """Text from input data made safe for a terminal: escape sequences and control
    characters (but tab) removed."""
    from spikeforensics.ingest.base import strip_controls

    return strip_controls(text)


store_option = click.option(
    "--store",
    type=click.Path(),
    metavar="DIRECTORY",
    default=None,
    help="Run store folder. Default: $SPIKEFORENSICS_STORE, else ./.spikeforensics",
)
debug_option = click.option("--debug", is_flag=True, hidden=True, help="Show tracebacks.")
follow_symlinks_option = click.option(
    "--follow-symlinks",
    is_flag=True,
    help="In a folder PATH, also read symlinks that lead outside the folder (not followed by default).",
)
quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress messages on stderr.")


@click.group(context_settings=CONTEXT_SETTINGS, epilog=EPILOG)
@click.version_option(__version__, "-V", "--version", prog_name="spikeforensics")
@click.pass_context
def cli(ctx):
    """Offline forensics for training-loss spikes and NaNs.

    \b
    Ingest what a run left behind, then diagnose it:
      spikeforensics ingest train.log grads.csv batches.jsonl --run gpt-03
      spikeforensics diagnose --run gpt-03
    or both at once:
      spikeforensics diagnose sample_logs/tune/data_outlier_clip
    """
    ctx.color = _color_enabled()


# -- ingest ---------------------------------------------------------------------------


@cli.command(epilog=EPILOG_PLAIN)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--run", "run_id", help="Run id. Default: the stem of the first PATH (folder name for a folder).")
@store_option
@click.option(
    "--format",
    "fmt",
    default=None,
    help="Force a parser instead of detecting the format (a name from docs/formats.md, e.g. megatron, "
    "hf_trainer, jsonl_metrics; an unknown name lists them all). Turns off mixing grammars in one file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the ingest summary as JSON on stdout.")
@click.option(
    "--aliases",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML file extending the metric/column alias table (also $SPIKEFORENSICS_ALIASES).",
)
@follow_symlinks_option
@quiet_option
@debug_option
@handle_errors
def ingest(paths, run_id, store, fmt, as_json, aliases, follow_symlinks, quiet, debug):
    """Ingest logs, metric files, gradient dumps, batch manifests and telemetry into a run.

    PATH is a file or a folder (ingested file by file). Formats are detected from
    content; a gzip, xz, bzip2 or zstd file (train.log.gz) or a UTF-16 one is read
    as the file it holds. Ingesting the same file twice changes nothing; new files append to the run.
    A file with nothing usable is skipped with a warning (exit 1 only when no PATH is usable).

    \b
    Examples:
      spikeforensics ingest train.log --run gpt-03
      spikeforensics ingest run_dir/ --store /data/sf-store
      spikeforensics ingest metrics.jsonl --format jsonl_metrics --json
    """
    from spikeforensics import api
    from spikeforensics.ingest.aliases import load_user_aliases

    load_user_aliases(aliases)
    if run_id == "":
        raise click.UsageError("--run needs a run id (letters, digits, '.', '_', '-')")
    report = api.ingest(
        list(paths),
        run_id=run_id,
        store=store,
        fmt=fmt,
        follow_symlinks=follow_symlinks,
        progress=None if quiet else (lambda m: note(f"reading {m}")),
    )
    for f in report.files:
        if f.status == "failed":
            warn(f"skipped {f.message}")
        elif f.status == "unchanged":
            note(f.message, quiet)
        elif f.unparsed:
            first = f"; first at line {f.unparsed_examples[0][0]}" if f.unparsed_examples else ""
            warn(f"{f.path}: {f.unparsed} unparsed line(s){first}")
    if not report.ok:
        raise InputError(f"nothing usable in {', '.join(map(str, paths))}")
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2, default=str))
        return
    say(_ingest_summary(report))


def _ingest_summary(report) -> str:
    lines = [f"run {report.run_id} (store {report.store})"]
    for f in report.files:
        if f.status != "ingested":
            lines.append(f"  {f.source}: {f.status}")
            continue
        rows = ", ".join(f"{n} {t}" for t, n in f.rows.items())
        extra = []
        if f.steps[0] is not None:
            extra.append(f"steps {f.steps[0]}-{f.steps[1]}")
        if f.ranks:
            extra.append(f"ranks {','.join(map(str, f.ranks))}")
        if f.events:
            extra.append("events " + ", ".join(f"{k} {v}" for k, v in f.events.items()))
        extra.append(f"{f.unparsed} unparsed")
        lines.append(f"  {f.source} [{f.format}]: {rows}; " + "; ".join(extra))
    return "\n".join(lines)


# -- diagnose ---------------------------------------------------------------------------


@cli.command(epilog=EPILOG)
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--run", "run_id", help="Run to diagnose (with PATHs: the run to ingest them into).")
@store_option
@click.option(
    "--out", type=click.Path(dir_okay=False), help="HTML report path. Default: <store>/runs/<RUN>/report.html"
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    help="Diagnosis JSON path (its skip list goes beside it as X.skiplist.json). Default: the report's path with .json.",
)
@click.option(
    "--rules",
    "rule_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    help="Extra folder of rule files (*.toml), added to the bundled rules. Repeatable.",
)
@click.option(
    "--params",
    "params_file",
    type=click.Path(exists=True, dir_okay=False),
    help="TOML file overriding detection/attribution parameters.",
)
@click.option(
    "--set", "overrides", multiple=True, metavar="SECTION.NAME=VALUE", help="Override one parameter. Repeatable."
)
@click.option(
    "--fail-on",
    type=click.Choice(["info", "warning", "critical"]),
    default=None,
    help="Exit 3 when an incident at or above this severity is found (for CI gates).",
)
@click.option(
    "--max-points",
    type=int,
    default=2000,
    show_default=True,
    help="Points per chart series before min/max downsampling (0 = all).",
)
@click.option(
    "--format",
    "out_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Summary on stdout: text, or the diagnosis as JSON.",
)
@click.option(
    "--aliases",
    type=click.Path(dir_okay=False),
    default=None,
    help="With PATHs: TOML file extending the alias tables, as for ingest (also $SPIKEFORENSICS_ALIASES).",
)
@click.option(
    "--append", is_flag=True, help="With PATHs: add them to the run even when it already holds other sources."
)
@follow_symlinks_option
@quiet_option
@debug_option
@handle_errors
def diagnose(
    paths,
    run_id,
    store,
    out,
    json_path,
    rule_dirs,
    params_file,
    overrides,
    fail_on,
    max_points,
    out_format,
    aliases,
    append,
    follow_symlinks,
    quiet,
    debug,
):
    """Detect, attribute and report the instabilities of a run.

    Writes the HTML postmortem X.html (--out), X.json, X.skiplist.json and a Markdown
    copy X.md, and prints a short summary. With PATHs, ingests them first (into --run,
    else a run named after the first PATH; a run that already holds other sources is
    never added to without --append: a fresh run is used, or --run is refused).

    \b
    Examples:
      spikeforensics diagnose --run gpt-03
      spikeforensics diagnose sample_logs/tune/data_outlier_clip --out report.html
      spikeforensics diagnose --run gpt-03 --fail-on critical --format json
    """
    from spikeforensics import api
    from spikeforensics.attribute.diagnosis import fail_on_exit_code
    from spikeforensics.params import Params
    from spikeforensics.report.terminal import summary_lines

    if run_id == "":
        raise click.UsageError("--run needs a run id (letters, digits, '.', '_', '-')")
    if not paths and not run_id:
        raise click.UsageError("give --run RUN_ID, or PATHs to ingest and diagnose")
    from spikeforensics.params import ParamError

    # parameters first: a bad value is a usage error before any work
    try:
        params = Params.load(params_file, list(overrides))
    except ParamError as exc:
        raise click.UsageError(_plain(str(exc))) from None
    if paths:
        from spikeforensics.ingest.aliases import load_user_aliases

        load_user_aliases(aliases)
        try:
            run_id, moved = api.run_for_paths(
                list(paths), run_id, store, append=append, follow_symlinks=follow_symlinks
            )
        except api.RunConflictError as exc:
            raise click.UsageError(str(exc)) from None
        if moved:
            warn(moved)
        report = api.ingest(
            list(paths),
            run_id=run_id,
            store=store,
            follow_symlinks=follow_symlinks,
            progress=None if quiet else (lambda m: note(f"reading {m}")),
        )
        for f in report.files:
            if f.status == "failed":
                warn(f"skipped {f.message}")
        if not report.ok:
            raise InputError(f"nothing usable in {', '.join(map(str, paths))}")
        run_id = report.run_id
    run = api.load_run(run_id, store)  # an unknown run fails here, before any progress output
    note(f"diagnosing run {run_id}", quiet)
    diagnosis = api.diagnose(run, params=params, rule_dirs=list(rule_dirs))
    written = api.write_reports(diagnosis, run, store=store, out=out, json_path=json_path, max_points=max_points)
    if out_format == "json":
        from spikeforensics.attribute.diagnosis import json_safe

        click.echo(json.dumps(json_safe(diagnosis), indent=2))
    else:
        say("\n".join(summary_lines(diagnosis, written)))
    if (diagnosis.get("verdict") or {}).get("status") == "incomplete":
        _report_internal_failure(diagnosis, written, debug or os.environ.get("SPIKEFORENSICS_DEBUG"))
        sys.exit(EXIT_INTERNAL)
    if fail_on_exit_code(diagnosis, fail_on):
        sys.exit(EXIT_INCIDENTS)


def _report_internal_failure(diagnosis: dict, written: dict, debug) -> None:
    """A detector or stage raised: say on stderr that it is a bug in the tool and where the traceback is."""
    failed = [n for n in diagnosis.get("notes") or [] if isinstance(n, dict) and n.get("traceback")]
    names = ", ".join(str(n.get("detector")) for n in failed) or "a stage"
    where = written.get("json")
    click.echo(
        f"spikeforensics: internal error: {names} failed - this is a bug in spikeforensics, not in your run; "
        "the diagnosis is incomplete (the other detectors ran)."
        + ("" if debug else f" The traceback is in the notes of {where} (or re-run with --debug to print it)."),
        err=True,
    )
    if debug:
        for n in failed:
            click.echo(str(n["traceback"]).rstrip(), err=True)


# -- runs, export ---------------------------------------------------------------------------


@cli.command(epilog=EPILOG_PLAIN)
@store_option
@click.option("--format", "out_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@debug_option
@handle_errors
def runs(store, out_format, debug):
    """List the runs in the store.

    \b
    Example:
      spikeforensics runs --format json
    """
    from spikeforensics import api

    found = api.runs(store)
    if out_format == "json":
        click.echo(json.dumps([r.__dict__ for r in found], indent=2, default=str))
        return
    if not found:
        note("no runs in the store")
        return
    width = max(len("run"), *(len(r.run_id) for r in found))
    click.echo(f"{'run':<{width}} {'sources':>7} {'records':>8} {'unparsed':>8}  {'steps':<14} formats")
    for r in found:
        steps = f"{r.first_step}-{r.last_step}" if r.first_step is not None else "-"
        click.echo(
            f"{r.run_id:<{width}} {r.sources:>7} {r.records:>8} {r.unparsed:>8}  {steps:<14} {','.join(r.formats)}"
        )


@cli.command(epilog=EPILOG_PLAIN)
@click.option("--run", "run_id", required=True, help="Run to export from.")
@click.option(
    "--table", required=True, type=click.Choice(["metrics", "events", "layers", "batches", "telemetry", "sources"])
)
@click.option(
    "--format", "out_format", type=click.Choice(["jsonl", "csv", "parquet"]), default="jsonl", show_default=True
)
@click.option("--out", type=click.Path(dir_okay=False), help="Output file. Default: stdout.")
@store_option
@debug_option
@handle_errors
def export(run_id, table, out_format, out, store, debug):
    """Write one table of a run with the canonical columns of CONTRACT.md.

    In JSONL a non-finite value is the string "nan", "inf" or "-inf".

    \b
    Examples:
      spikeforensics export --run gpt-03 --table metrics
      spikeforensics export --run gpt-03 --table events --format csv --out events.csv
    """
    from spikeforensics import api
    from spikeforensics.export import write_export

    frame = api.export(run_id, table, store)
    data = write_export(frame, out_format, out)
    if data is not None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


# -- rules -----------------------------------------------------------------------------------


@cli.group(context_settings=CONTEXT_SETTINGS)
def rules():
    """Root-cause rules (rules/*.toml): validate them."""


@rules.command("check", epilog=EPILOG_PLAIN)
@click.argument("dirs", nargs=-1, type=click.Path(exists=True))
@click.option("--format", "out_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@debug_option
@handle_errors
def rules_check(dirs, out_format, debug):
    """Validate rule files: the bundled rules plus DIRS (folders or .toml files).

    \b
    Example:
      spikeforensics rules check my_rules/
    """
    from spikeforensics.attribute.rules import load_rules

    loaded = load_rules(list(dirs))
    if out_format == "json":
        click.echo(json.dumps({"ok": True, "rules": [r.name for r in loaded]}, indent=2))
    else:
        click.echo(f"{len(loaded)} rules OK")
