"""Regenerate docs/cli.md from the CLI's own --help (tests/test_docs.py checks it is current)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from spikeforensics.cli import cli


def main() -> None:
    runner = CliRunner()
    parts = [
        "# Command reference\n",
        "Generated from `--help` by `python tools/gen_cli_docs.py`; do not edit by hand.\n",
    ]
    names = [[]]
    for name, command in cli.commands.items():
        names.append([name])
        names.extend([name, sub] for sub in getattr(command, "commands", {}))
    for words in names:
        text = runner.invoke(cli, [*words, "--help"], prog_name="spikeforensics", terminal_width=100).output
        title = " ".join(["spikeforensics", *words])
        parts.append(f"## {title}\n\n```\n{text.strip()}\n```\n")
    out = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
    out.write_text("\n".join(parts))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
