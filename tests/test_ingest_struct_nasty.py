"""Hand-made nasty inputs for the structured parsers: bad JSON among good lines, NaN
tokens anywhere, truncated last lines, CRLF, invalid UTF-8, empty files. Never a crash;
bad lines are counted as unparsed with their line numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spikeforensics.ingest import IngestError, ingest_paths, parse_file
from spikeforensics.store import Store

NONFINITE = ["NaN", "nan", "Infinity", "-Infinity", "inf", "-inf", "NAN", "INF", '"nan"', '"inf"']


def test_bad_json_lines_counted_with_line_numbers(tmp_path):
    rows = [
        '{"step": 1, "loss": 2.0}',
        "this is not json",
        '{"step": 2, "loss": 1.9',
        '{"step": 3, "loss": 1.8}',
        "",
        '{"step": 4, "loss": ',
        '{"step": 5 "loss": 1.7}',
        '{"step": 6, "loss": 1.6}',
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(rows), encoding="utf-8")  # no newline at the end either
    r = parse_file(path, "jsonl_metrics")
    assert r.unparsed == 3 and [ln for ln, _ in r.unparsed_examples] == [3, 6, 7]
    loss = r.tables["metrics"].filter(pl.col("name") == "loss").sort("line")
    assert loss.get_column("step").to_list() == [1, 3, 6] and loss.get_column("line").to_list() == [1, 4, 8]


@pytest.mark.parametrize("token", NONFINITE)
def test_nonfinite_tokens_in_every_position(tmp_path, token):
    rows = [
        f'{{"loss": {token}, "step": 1, "grad_norm": 1.0}}',
        f'{{"step": 2, "grad_norm": {token}, "loss": 1.0}}',
        f'{{"step": 3, "loss": 1.0, "grad_norm": {token}}}',
        f'{{"step":4,"loss":{token},"lr":{token}}}',
    ]
    path = tmp_path / "n.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    r = parse_file(path, "jsonl_metrics")
    assert r.unparsed == 0
    m = r.tables["metrics"]
    vals = {(s, n): v for s, n, v in m.select("step", "name", "value").iter_rows()}
    for key in [(1, "loss"), (2, "grad_norm"), (3, "grad_norm"), (4, "loss"), (4, "lr")]:
        assert not math.isfinite(vals[key]), (token, key)
    assert vals[(2, "loss")] == 1.0
    assert r.tables["events"].filter(pl.col("kind") == "nan").height == 4


def test_crlf_invalid_utf8_truncated_last_line(tmp_path):
    data = (
        b'{"current_steps": 10, "loss": 0.5, "lr": 1e-5}\r\n'
        b'{"current_steps": 20, "loss": 0.4, "lr": 1e-5, "note": "caf\xe9"}\r\n'
        b'{"current_steps": 30, "lo'
    )
    path = tmp_path / "trainer_log.jsonl"
    path.write_bytes(data)
    r = parse_file(path, "jsonl_metrics")
    loss = r.tables["metrics"].filter(pl.col("name") == "loss").sort("line")
    assert loss.get_column("step").to_list() == [10, 20]
    assert r.unparsed == 1 and r.unparsed_examples[0][0] == 3
    csv = tmp_path / "metrics.csv"
    csv.write_bytes(b"epoch,step,train_loss_step\r\n0,49,7.5\r\n0,99,n\xffan\r\n0,149,nan\r\n0,19")
    m = parse_file(csv, "csv_metrics").tables["metrics"]
    loss = m.filter(pl.col("name") == "loss").sort("line")
    assert loss.get_column("step").to_list() == [49, 149] and math.isnan(loss.item(1, "value"))
    assert m.filter(pl.col("line") == 5).get_column("step").to_list() == [19]  # cut-short row: its epoch only


@pytest.mark.parametrize(
    "fmt",
    ["jsonl_metrics", "csv_metrics", "hf_trainer", "hf_trainer_state", "layers", "batches", "telemetry", "kernel"],
)
def test_empty_and_blank_files_never_crash(tmp_path, fmt):
    for name, content in (("empty.txt", b""), ("blank.txt", b"\n\n  \r\n")):
        path = tmp_path / name
        path.write_bytes(content)
        try:
            r = parse_file(path, fmt)
        except IngestError as exc:  # a clear one-line refusal is fine
            assert "\n" not in str(exc)
            continue
        assert r.total_rows == 0


def test_empty_file_in_a_folder_is_skipped(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "empty.jsonl").write_bytes(b"")
    (tmp_path / "run" / "m.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    report = ingest_paths([tmp_path / "run"], "r", Store(tmp_path / "s"))
    status = {Path(f.path).name: f.status for f in report.files}
    assert status == {"empty.jsonl": "failed", "m.jsonl": "ingested"}


def test_trainer_state_with_bare_nan_and_broken_json(tmp_path):
    state = {
        "global_step": 3,
        "max_steps": 3,
        "log_history": [
            {"epoch": 0.1, "grad_norm": float("nan"), "learning_rate": 1e-5, "loss": 2.0, "step": 1},
            {"epoch": 0.2, "grad_norm": float("inf"), "learning_rate": 1e-5, "loss": float("nan"), "step": 2},
            {"epoch": 0.2, "eval_loss": 1.5, "eval_runtime": 3.0, "step": 2},
            {"epoch": 0.3, "step": 3, "train_loss": 1.8, "train_runtime": 9.0},
        ],
    }
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    assert "NaN" in path.read_text() and "Infinity" in path.read_text()
    r = parse_file(path, "hf_trainer_state")
    m = r.tables["metrics"]
    assert m.filter(pl.col("name") == "grad_norm").height == 2
    assert m.filter(pl.col("name") == "eval_loss").item(0, "record") is None
    assert r.tables["events"].filter(pl.col("kind") == "nan").get_column("step").to_list() == [1, 2]
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(state), encoding="utf-8")
    mc = parse_file(compact, "hf_trainer_state").tables["metrics"]
    assert mc.get_column("line").null_count() == mc.height and mc.height == m.height
    broken = tmp_path / "broken.json"
    broken.write_text(path.read_text()[:200], encoding="utf-8")
    with pytest.raises(IngestError, match="broken.json"):
        parse_file(broken, "hf_trainer_state")


value = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from(["nan", "inf", "-inf", "NaN"]),
    st.none(),
)
garbage = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.integers(0, 10_000), value, value, garbage, st.booleans()), min_size=1, max_size=25))
def test_jsonl_fuzz_never_crashes_and_accounts_for_every_line(tmp_path, rows):
    lines = []
    good = 0
    for step, loss, gnorm, junk, broken in rows:
        if broken:
            lines.append("{" + junk.replace("\n", " ").replace("\r", " ").replace("}", ""))
            continue

        def enc(v):
            if v is None:
                return "null"
            if isinstance(v, str):
                return f'"{v}"'
            return repr(v) if math.isfinite(v) else ("NaN" if v != v else ("Infinity" if v > 0 else "-Infinity"))

        lines.append(f'{{"step": {step}, "loss": {enc(loss)}, "grad_norm": {enc(gnorm)}}}')
        good += 1
    path = tmp_path / "fuzz.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = parse_file(path, "jsonl_metrics")
    assert r.unparsed == len(lines) - good
    m = r.tables.get("metrics")
    if m is not None:
        assert m.get_column("name").is_in(["loss", "grad_norm"]).all()
        assert m.get_column("step").drop_nulls().is_between(0, 10_000).all()


@settings(max_examples=40, deadline=None)
@given(vals=st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True), st.booleans()), min_size=1, max_size=15))
def test_hf_dict_fuzz_round_trips_values(vals):
    import tempfile

    def py(v, quoted):
        s = repr(v) if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))
        return f"'{s}'" if quoted else s

    text = "\n".join(f"{{'loss': {py(v, q)}, 'learning_rate': 1e-05, 'epoch': 0.5}}" for v, q in vals)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "out.log"
        path.write_text(text + "\n", encoding="utf-8")
        r = parse_file(path, "hf_trainer")
    got = r.tables["metrics"].filter(pl.col("name") == "loss").sort("line").get_column("value").to_list()
    assert len(got) == len(vals)
    for (v, _), g in zip(vals, got):
        assert (math.isnan(v) and math.isnan(g)) or v == g
