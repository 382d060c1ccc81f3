"""Docs that cannot drift: README's set-up commands, CLI reference vs --help."""

from __future__ import annotations

import re

from conftest import REPO

from spikeforensics.cli import cli


def _ci_commands() -> dict[str, str]:
    out = {}
    for line in (REPO / ".ci" / "commands").read_text().splitlines():
        if ":" in line and not line.startswith("#"):
            key, _, cmd = line.partition(":")
            out[key.strip()] = cmd.strip()
    return out


def test_readme_opens_with_the_two_setup_commands_ci_runs():
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", readme, flags=re.S)
    first = blocks[0].strip().splitlines()
    commands = [line for line in first if line.strip() and not line.startswith("#")]
    ci = _ci_commands()
    assert commands == [ci["MAIN_COMMAND"], ci["TEST_COMMAND"]]
    assert readme.index(blocks[0]) < readme.index("##"), "the commands come before any section"


def test_every_command_is_in_the_cli_reference():
    reference = (REPO / "docs" / "cli.md").read_text()
    names = []
    for name, command in cli.commands.items():
        names.append(name)
        for sub in getattr(command, "commands", {}):
            names.append(f"{name} {sub}")
    for name in names:
        assert f"spikeforensics {name}" in reference, name


def test_cli_reference_matches_help():
    """docs/cli.md embeds each command's --help; regenerate with `python tools/gen_cli_docs.py`."""
    from click.testing import CliRunner

    reference = (REPO / "docs" / "cli.md").read_text()
    runner = CliRunner()
    for name in cli.commands:
        text = runner.invoke(cli, [name, "--help"], prog_name="spikeforensics", terminal_width=100).output
        assert text.strip() in reference, f"docs/cli.md is stale for `{name}`: run python tools/gen_cli_docs.py"


def test_diagnosis_doc_names_every_field_the_diagnosis_writes():
    """docs/diagnosis.md must not go stale: every top-level, incident and sample field of a real
    diagnosis (a tune fixture with a manifest) is named there."""
    import tempfile

    from conftest import TUNE

    from spikeforensics import api

    doc = (REPO / "docs" / "diagnosis.md").read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        folder = TUNE / "data_outlier_clip"
        api.ingest([p for p in folder.iterdir() if p.name != "ground_truth.json"], run_id="d", store=tmp)
        d = api.diagnose("d", store=tmp)
    inc = d["incidents"][0]
    names = set(d) | set(inc) | set(inc["samples"][0]) | set(d["calibration"]) | set(d["skiplist"])
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    assert not missing, f"docs/diagnosis.md does not mention {missing}"
