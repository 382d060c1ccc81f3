"""Faults found by the fault/fuzz probe (issue 14): each test reproduces one failure with a
small input made here, and holds the fix. Nothing lost, nothing leaked."""

from __future__ import annotations

import json
import os
import time

import polars as pl
import pytest
from _fault_helpers import write_lines

from spikeforensics.cli import cli
from spikeforensics.ingest import ingest_paths, parse_file
from spikeforensics.ingest.base import MAX_STEP

BIG = 2**63  # does not fit Int64


def _nanogpt(n=20, first=0):
    return [f"iter {i}: loss {3 - i * 0.01:.4f}, time 100.00ms, mfu 10.00%" for i in range(first, first + n)]


def _losses(store, run):
    m = store.table(run, "metrics").filter(pl.col("name") == "loss").sort("step")
    return m


# -- 1. line endings ------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_every_line_ending_reads_each_record(tmp_path, store, end):
    path = write_lines(tmp_path / "train.log", [*_nanogpt(20), "saving checkpoint to out"], end)
    ingest_paths([path], "r", store)
    loss = _losses(store, "r")
    assert loss.get_column("step").to_list() == list(range(20))
    assert loss.get_column("value").to_list() == pytest.approx([3 - i * 0.01 for i in range(20)])
    assert loss.get_column("line").to_list() == list(range(1, 21))
    assert store.table("r", "events").filter(pl.col("kind") == "checkpoint_save").height == 1
    assert store.sources("r").get_column("lines").to_list() == [21]


def test_lone_cr_file_streamed_by_the_megatron_parser(tmp_path, store):
    lines = [
        f" iteration {i}/ 100 | consumed samples: {i * 8} | lm loss: {3 - i * 0.01:.6E} | grad norm: 1.000 |"
        for i in range(1, 21)
    ]
    path = write_lines(tmp_path / "megatron.log", lines, "\r")
    ingest_paths([path], "r", store, fmt="megatron")
    loss = _losses(store, "r")
    assert loss.get_column("step").to_list() == list(range(1, 21))
    assert loss.get_column("value").n_unique() == 20


def test_tqdm_redraws_inside_a_newline_file_still_split(tmp_path, store):
    lines = []
    for i in range(1, 11):
        lines.append(
            f" {i * 10}%|##| {i}/10 [00:01<00:01,  1.00it/s]\r {i * 10}%|##| {i}/10 [00:01<00:01,  1.00it/s]"
            + "{'loss': %.4f, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 0.%d}" % (3 - i * 0.01, i)
        )
    path = write_lines(tmp_path / "hf.log", lines)
    ingest_paths([path], "r", store)
    loss = _losses(store, "r")
    assert loss.get_column("step").to_list() == list(range(1, 11))
    assert loss.get_column("line").to_list() == list(range(1, 11))


# -- 2. bounded steps -------------------------------------------------------------------------


def _text_logs(big):
    nanogpt = _nanogpt(20)
    nanogpt[5] = f"iter {big}: loss 2.0, time 100.00ms, mfu 10.00%"
    llmc = [
        f"step {i:4d}/100 | train loss {3 - i * 0.01:.6f} | norm 1.0000 | lr 6.00e-04 | (100.00 ms | 5000 tok/s)"
        for i in range(1, 21)
    ]
    llmc[5] = f"step {big}/100 | train loss 2.0 | norm 1.0000 | lr 6.00e-04 | (100.00 ms | 5000 tok/s)"
    ds = [
        f"[2023-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={i}, skipped=0, lr=[0.0001], "
        "mom=[(0.9, 0.95)]"
        for i in range(1, 21)
    ]
    ds[5] = ds[5].replace("step=6,", f"step={big},")
    hf = []
    for i in range(1, 21):
        hf.append(f" {i * 5}%|##| {i}/20 [00:01<00:01,  1.00it/s]")
        hf.append("{'loss': %.4f, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 0.%d}" % (3 - i * 0.01, i))
    hf[10] = f" 50%|##| {big}/20 [00:01<00:01,  1.00it/s]"
    fs = [
        f"2023-01-01 00:00:00 | INFO | train_inner | epoch 001:    {i} / 100 loss=3.{i:02d}, nll_loss=2.0, "
        f"ppl=4.0, wps=1000, ups=1, wpb=1000, bsz=8, num_updates={i}, lr=1e-05, gnorm=1.0, clip=0, train_wall=1, "
        "wall=10"
        for i in range(1, 21)
    ]
    fs[5] = fs[5].replace("num_updates=6,", f"num_updates={big},")
    mega = [
        f" iteration {i}/ 100 | consumed samples: {i * 8} | lm loss: {3 - i * 0.01:.6E} | grad norm: 1.000 |"
        for i in range(1, 21)
    ]
    mega[5] = mega[5].replace("iteration 6/", f"iteration {big}/")
    js = ['{"step": %d, "loss": %.3f}' % (i, 3 - i * 0.01) for i in range(20)]
    js[5] = '{"step": %d, "loss": 2.0}' % big
    csv = ["step,loss"] + [f"{i},{3 - i * 0.01:.3f}" for i in range(20)]
    csv[6] = f"{big},2.0"
    return {
        "nanogpt.log": (nanogpt, "nanogpt", 6),
        "llmc.log": (llmc, "llmc", 6),
        "deepspeed.log": (ds, "deepspeed", 6),
        "hf.log": (hf, "hf_trainer", 12),
        "fairseq.log": (fs, "fairseq", 6),
        "megatron.log": (mega, "megatron", 6),
        "metrics.jsonl": (js, "jsonl_metrics", 6),
        "metrics.csv": (csv, "csv_metrics", 7),
    }


@pytest.mark.parametrize("big", [BIG, 2**63 - 1, MAX_STEP + 1])
@pytest.mark.parametrize("name", list(_text_logs(0)))
def test_a_step_out_of_range_costs_its_row_not_the_file(tmp_path, store, name, big):
    lines, fmt, bad_line = _text_logs(big)[name]
    path = write_lines(tmp_path / name, lines)
    report = ingest_paths([path], "r", store)
    f = report.files[0]
    assert f.status == "ingested" and f.format.split("+")[0] == fmt
    assert f.unparsed == 1 and f.unparsed_examples[0][0] == bad_line
    steps = store.table("r", "metrics").get_column("step").drop_nulls()
    assert steps.len() > 0 and steps.max() <= MAX_STEP
    records = store.table("r", "metrics").filter(pl.col("record").is_not_null())
    assert records.get_column("step").n_unique() == 19


def test_a_step_at_the_bound_is_kept(tmp_path):
    lines = _nanogpt(5) + [f"iter {MAX_STEP}: loss 2.0, time 100.00ms, mfu 10.00%"]
    result = parse_file(write_lines(tmp_path / "train.log", lines), "nanogpt")
    assert result.unparsed == 0
    assert result.tables["metrics"].get_column("step").max() == MAX_STEP


def test_diagnose_survives_the_largest_int64_step(tmp_path, runner):
    path = write_lines(
        tmp_path / "train.log", _nanogpt(60) + [f"iter {2**63 - 1}: loss 2.0, time 100.00ms, mfu 10.00%"]
    )
    store = tmp_path / "st"
    res = runner.invoke(cli, ["diagnose", str(path), "--store", str(store), "--out", str(tmp_path / "r.html"), "-q"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r.html").stat().st_size > 0


@pytest.mark.parametrize("kind", ["layers", "batches"])
def test_one_malformed_csv_row_costs_that_row(tmp_path, store, kind):
    if kind == "layers":
        lines = ["step,layer,grad_norm"] + [f"{i},h.{j},{1.0 + j * 0.1}" for i in range(10) for j in range(3)]
        lines[5] = '1,"h.1,broken'
    else:
        lines = ["step,sample_id,sample_loss"] + [f"{i},s{i}-{j},2.0" for i in range(10) for j in range(4)]
        lines[7] = '1,"s-x,2.0'
    path = write_lines(tmp_path / f"{kind}.csv", lines)
    f = ingest_paths([path], "r", store).files[0]
    assert f.status == "ingested" and f.format == kind
    assert f.unparsed == 1 and f.unparsed_examples[0][0] == (6 if kind == "layers" else 8)
    assert store.table("r", kind).height == len(lines) - 2


# -- 3. crash leftovers -----------------------------------------------------------------------


def _metrics_frame():
    return pl.DataFrame({"step": [1], "name": ["loss"], "value": [1.0]})


def test_staging_of_a_killed_ingest_is_swept_by_the_next_command(tmp_path, runner):
    import subprocess
    import sys

    root = tmp_path / "st"
    code = (
        "import os, signal, polars as pl\n"
        "from spikeforensics.store import Store\n"
        f"stage = Store({str(root)!r}).staging()\n"
        "stage.append('metrics', pl.DataFrame({'step': [1], 'name': ['loss'], 'value': [1.0]}))\n"
        "stage._close()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    assert len(list((root / ".tmp").iterdir())) == 1  # what a kill -9 leaves behind
    res = runner.invoke(cli, ["runs", "--store", str(root)])
    assert res.exit_code == 0
    assert list((root / ".tmp").iterdir()) == []


def test_live_staging_is_kept_and_idle_foreign_staging_swept(tmp_path):
    from spikeforensics.store import STALE_STAGING_S, Store

    store = Store(tmp_path / "st")
    live = store.staging()
    live.append("metrics", _metrics_frame())
    fresh_foreign = tmp_path / "st" / ".tmp" / "0123abcd"  # an older version's name, or another host's
    old_foreign = tmp_path / "st" / ".tmp" / "otherhost-12-ab"
    for folder in (fresh_foreign, old_foreign):
        folder.mkdir()
        (folder / "metrics.parquet").write_bytes(b"x")
    past = time.time() - STALE_STAGING_S - 10
    os.utime(old_foreign / "metrics.parquet", (past, past))
    os.utime(old_foreign, (past, past))
    Store(tmp_path / "st")
    assert live.folder.is_dir() and fresh_foreign.is_dir() and not old_foreign.exists()
    live.__exit__(None, None, None)


def test_failed_commit_removes_its_staging_and_moved_files(tmp_path, store, monkeypatch):
    import errno

    from spikeforensics.store import StoreError

    path = write_lines(tmp_path / "train.log", _nanogpt(20))
    real_replace = os.replace

    def full_disk_at_the_manifest(src, dst):
        if "sources" in str(dst):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full_disk_at_the_manifest)
    with pytest.raises(StoreError, match="no space left"):
        ingest_paths([path], "r", store)
    monkeypatch.setattr(os, "replace", real_replace)
    assert list((store.root / ".tmp").iterdir()) == []
    assert list((store.root / "tables").rglob("*.parquet")) == []  # nothing for a direct read either


def test_full_disk_while_staging_leaves_nothing_and_names_the_store(tmp_path, runner, monkeypatch):
    import errno

    import pyarrow.parquet as pq

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    monkeypatch.setattr(pq.ParquetWriter, "close", full)
    path = write_lines(tmp_path / "train.log", _nanogpt(20))
    root = tmp_path / "st"
    res = runner.invoke(cli, ["ingest", str(path), "--store", str(root), "--run", "r"])
    assert res.exit_code == 1
    assert "no space left" in res.output and str(root) in res.output
    assert "cannot read" not in res.output and "internal error" not in res.output
    assert list((root / ".tmp").iterdir()) == []


def test_uncommitted_data_of_a_killed_commit_is_swept(tmp_path, store, monkeypatch):
    import spikeforensics.store as store_mod

    path = write_lines(tmp_path / "train.log", _nanogpt(20))
    ingest_paths([path], "r", store)
    committed = next((store.root / "tables" / "metrics" / "run=r").glob("*.parquet"))
    orphan = committed.with_name("deadbeefdeadbeef.parquet")  # data renamed, manifest never
    orphan.write_bytes(committed.read_bytes())
    store_mod.Store(store.root)  # at once: no live commit holds a data file without its manifest
    assert not orphan.exists() and committed.exists()
    direct = pl.read_parquet(str(store.root / "tables" / "metrics" / "**" / "*.parquet"), hive_partitioning=True)
    assert direct.height == store.table("r", "metrics").height


def test_a_file_that_grew_is_not_stored_twice(tmp_path, store):
    path = write_lines(tmp_path / "train.log", _nanogpt(20))
    ingest_paths([path], "r", store)
    write_lines(path, _nanogpt(30))  # the same log, 10 more records appended
    report = ingest_paths([path], "r", store)
    assert report.files[0].status == "ingested"
    loss = _losses(store, "r")
    assert loss.get_column("step").to_list() == list(range(30))
    assert store.sources("r").height == 1
    assert len(list((store.root / "tables" / "metrics" / "run=r").glob("*.parquet"))) == 1
    assert len(list((store.root / "tables" / "sources" / "run=r").glob("*.parquet"))) == 1
    # another file of the same name elsewhere is another source
    other = tmp_path / "b"
    other.mkdir()
    ingest_paths([write_lines(other / "train.log", _nanogpt(5, first=100))], "r", store)
    assert store.sources("r").height == 2


# -- 4. store errors named as store errors -------------------------------------------------------


def test_store_path_that_is_a_file(tmp_path, runner, monkeypatch):
    path = write_lines(tmp_path / "train.log", _nanogpt(20))
    blocker = tmp_path / "store-file"
    blocker.write_text("x")
    for args in (
        ["ingest", str(path), "--run", "r", "--store", str(blocker)],
        ["runs", "--store", str(blocker)],
        ["diagnose", "--run", "r", "--store", str(blocker)],
    ):
        res = runner.invoke(cli, args)
        assert res.exit_code == 1, res.output
        assert str(blocker) in res.output and "not a folder" in res.output
        assert len(res.output.strip().splitlines()) <= 2  # a progress line at most, then the error
    monkeypatch.setenv("SPIKEFORENSICS_STORE", str(blocker))
    res = runner.invoke(cli, ["ingest", str(path), "--run", "r"])
    assert res.exit_code == 1 and str(blocker) in res.output


def test_a_file_inside_the_store_where_a_folder_belongs(tmp_path, runner):
    path = write_lines(tmp_path / "train.log", _nanogpt(20))
    root = tmp_path / "st"
    (root / "tables").mkdir(parents=True)
    (root / "tables" / "metrics").write_text("x")
    res = runner.invoke(cli, ["ingest", str(path), "--run", "r", "--store", str(root)])
    assert res.exit_code == 1
    assert f"store {root}" in res.output and "cannot read" not in res.output


@pytest.mark.parametrize("err", ["EROFS", "EACCES"])
def test_read_only_or_forbidden_store(tmp_path, runner, monkeypatch, err):
    import errno
    import pathlib

    path = write_lines(tmp_path / "train.log", _nanogpt(20))
    root = tmp_path / "st"
    real_mkdir = pathlib.Path.mkdir

    def refuse(self, *a, **k):
        if str(self).startswith(str(root)):
            raise OSError(getattr(errno, err), os.strerror(getattr(errno, err)), str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "mkdir", refuse)
    res = runner.invoke(cli, ["ingest", str(path), "--run", "r", "--store", str(root)])
    assert res.exit_code == 1
    line = res.output.strip().splitlines()[-1]
    assert line.startswith(f"spikeforensics: error: store {root}: cannot write")
    assert ("read-only" if err == "EROFS" else "permission denied") in line


# -- 5. trust boundaries ----------------------------------------------------------------------


def test_control_characters_never_reach_the_terminal(tmp_path, runner):
    from spikeforensics.ingest.base import strip_controls

    assert strip_controls("a\x1b[31mred\x1b[0m\x1b]0;title\x07\tb\x00\x7f\x9bc\nd") == "ared\tbcd"
    assert strip_controls("x\ny\x1b[2J", keep_newlines=True) == "x\ny"
    folder = tmp_path / "run"
    folder.mkdir()
    write_lines(folder / "train.log", _nanogpt(20))
    (folder / "evil\x1b[2J\x1b]0;pwned\x07.bin").write_bytes(bytes(range(256)) * 4)
    res = runner.invoke(cli, ["ingest", str(folder), "--store", str(tmp_path / "st")])
    assert res.exit_code == 0
    assert "\x1b" not in res.output and "\x07" not in res.output and "evil" in res.output


def _spiky_log(n=120, spike=80):
    return [f"iter {i}: loss {(9.0 if i == spike else 3 - i * 0.001):.4f}, time 100.00ms, mfu 10.00%" for i in range(n)]


def _diagnosed_log_lines(tmp_path, path, runner, extra=()):
    store = tmp_path / "st"
    res = runner.invoke(cli, ["ingest", str(path), "--store", str(store), "--run", "r", "-q"])
    assert res.exit_code == 0, res.output
    for change in extra:
        change()
    res = runner.invoke(cli, ["diagnose", "--run", "r", "--store", str(store), "--out", str(tmp_path / "r.html"), "-q"])
    assert res.exit_code == 0, res.output
    d = json.loads((tmp_path / "r.json").read_text())
    incs = [i for i in d["incidents"] if i["peak_step"] == 80]
    assert incs, d["incidents"]
    return incs[0]["log_lines"], (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("end", ["\n", "\r"])
def test_report_log_lines_come_from_the_ingested_file(tmp_path, runner, end):
    path = write_lines(tmp_path / "train.log", _spiky_log(), end)
    lines, _ = _diagnosed_log_lines(tmp_path, path, runner)
    peak = [x for x in lines if x["peak"]]
    assert peak and peak[0]["line"] == 81 and peak[0]["text"].startswith("iter 80: loss 9.0")


def test_report_log_lines_not_read_from_a_swapped_file(tmp_path, runner):
    path = write_lines(tmp_path / "train.log", _spiky_log())
    secret = "root:x:0:0:SECRET-LINE"
    swap = lambda: path.write_text("\n".join([secret] * 200) + "\n")  # noqa: E731
    lines, html = _diagnosed_log_lines(tmp_path, path, runner, extra=[swap])
    assert all("SECRET" not in x["text"] for x in lines)
    assert "changed since it was ingested" in lines[0]["text"]
    assert "SECRET" not in html


def test_symlinks_out_of_an_input_folder_are_not_followed(tmp_path, runner):
    outside = tmp_path / "outside"
    outside.mkdir()
    write_lines(outside / "secret.log", _nanogpt(20, first=500))
    (outside / "sub").mkdir()
    write_lines(outside / "sub" / "more.log", _nanogpt(20, first=900))
    folder = tmp_path / "run"
    folder.mkdir()
    write_lines(folder / "train.log", _nanogpt(20))
    (folder / "link.log").symlink_to(outside / "secret.log")
    (folder / "linkdir").symlink_to(outside / "sub")
    (folder / "inside.log").symlink_to(folder / "train.log")  # inside the folder: fine
    store = tmp_path / "st"
    res = runner.invoke(cli, ["ingest", str(folder), "--store", str(store), "--run", "r"])
    assert res.exit_code == 0, res.output
    assert "link.log" in res.output and "not followed" in res.output and "--follow-symlinks" in res.output
    from spikeforensics.store import Store

    sources = set(Store(store).sources("r").get_column("source"))
    assert len(sources) == 1 and sources <= {"train.log", "inside.log"}  # same content: one source
    assert Store(store).table("r", "metrics").get_column("step").max() < 500
    res = runner.invoke(cli, ["ingest", str(folder), "--store", str(store), "--run", "r2", "--follow-symlinks"])
    assert res.exit_code == 0, res.output
    assert {"link.log", "linkdir/more.log"} <= set(Store(store).sources("r2").get_column("source"))


# -- 6. rules files and parameters --------------------------------------------------------------


def _rule(weight="1.0", explanation="spike of {duration_steps} steps", when=None):
    when = when or '[{feature = "has_hard_spike", op = "==", value = true}]'
    return (
        f'[[rule]]\nname = "r1"\nlabel = "lr_too_high"\nweight = {weight}\nwhen = {when}\n'
        f'explanation = "{explanation}"\n'
    )


@pytest.mark.parametrize(
    "case",
    [
        "inf_weight",
        "nan_weight",
        "huge_width",
        "huge_precision",
        "bad_spec",
        "deep",
        "toml_deep",
        "too_big",
        "fifo",
        "device",
    ],
)
def test_hostile_rules_files_are_refused_with_one_line(tmp_path, runner, case):
    folder = tmp_path / "rules"
    folder.mkdir()
    f = folder / "mine.toml"
    if case == "inf_weight":
        f.write_text(_rule(weight="inf"))
    elif case == "nan_weight":
        f.write_text(_rule(weight="nan"))
    elif case == "huge_width":
        f.write_text(_rule(explanation="{duration_steps:>2000000000}"))
    elif case == "huge_precision":
        f.write_text(_rule(explanation="{duration_steps:.999999999f}"))
    elif case == "bad_spec":
        f.write_text(_rule(explanation="{duration_steps:>>>>}"))
    elif case == "deep":
        cond = '{feature = "has_hard_spike", op = "==", value = true}'
        for _ in range(40):
            cond = "{not = " + cond + "}"
        f.write_text(_rule(when=f"[{cond}]"))
    elif case == "toml_deep":
        f.write_text(_rule() + "x = " + "[" * 5000 + "]" * 5000 + "\n")
    elif case == "too_big":
        f.write_text(_rule() + "#" * (2 << 20) + "\n")
    elif case == "fifo":
        os.mkfifo(f)
    elif case == "device":
        f.symlink_to("/dev/zero")
    res = runner.invoke(cli, ["rules", "check", str(folder)])
    assert res.exit_code == 1, res.output
    assert str(f) in res.output and len(res.output.strip().splitlines()) == 1
    assert "internal error" not in res.output


def test_sane_format_specs_in_rules_still_load(tmp_path):
    from spikeforensics.attribute.rules import load_rules

    f = tmp_path / "ok.toml"
    f.write_text(
        _rule(explanation="{duration_steps:>8} {duration_steps:,} {duration_steps:.3g} {duration_steps:_<10.2f}")
    )
    assert [r.name for r in load_rules([f], include_builtin=False)] == ["r1"]


@pytest.mark.parametrize(
    "setting",
    [
        "series.window=1000000000000",
        "series.window=0",
        "hard_spike.z_threshold=inf",
        "hard_spike.z_threshold=-1",
        "series.window=2.5",
        "nonfinite.signals=5",
        "attribution.xid_strong_codes=['a']",
    ],
)
def test_out_of_range_parameters_are_usage_errors(tmp_path, runner, setting):
    path = write_lines(tmp_path / "train.log", _nanogpt(20))
    res = runner.invoke(cli, ["diagnose", str(path), "--store", str(tmp_path / "st"), "--set", setting, "-q"])
    assert res.exit_code == 2, res.output
    name = setting.split("=")[0]
    assert name in res.output
    assert "panic" not in res.output.lower() and not (tmp_path / "st").exists()  # refused before any work


def test_parameter_ranges_are_stated_and_defaults_pass():
    from spikeforensics.params import ParamError, Params

    with pytest.raises(ParamError, match=r"series.window = 1000000000000 is out of range: allowed \[1, 1e\+06\]"):
        Params.load(overrides=["series.window=1000000000000"])
    assert Params.load(overrides=["series.window=60", "hard_spike.z_threshold=6.5"]).series.window == 60


def test_params_file_must_be_a_small_regular_file(tmp_path, runner):
    fifo = tmp_path / "p.toml"
    os.mkfifo(fifo)
    path = write_lines(tmp_path / "train.log", _nanogpt(20))
    res = runner.invoke(cli, ["diagnose", str(path), "--store", str(tmp_path / "st"), "--params", str(fifo), "-q"])
    assert res.exit_code == 1 and "regular file" in res.output


# -- 7. unbounded inputs ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_a_record_with_20000_keys_is_refused_fast(tmp_path, store, kind):
    from spikeforensics.ingest import IngestError

    keys = [f"k{i}" for i in range(20_000)]
    if kind == "jsonl":
        rows = [json.dumps({"step": s, "loss": 1.0, **{k: 0.5 for k in keys}}) for s in range(3)]
        path = write_lines(tmp_path / "wide.jsonl", rows)
    else:
        rows = ["step,loss," + ",".join(keys)] + [f"{s},1.0," + ",".join("0.5" for _ in keys) for s in range(3)]
        path = write_lines(tmp_path / "wide.csv", rows)
    start = time.monotonic()
    with pytest.raises(IngestError, match=r"wide\.(jsonl|csv): .*20,00\d (keys|columns); at most 4,096"):
        ingest_paths([path], "r", store, fmt="jsonl_metrics" if kind == "jsonl" else "csv_metrics")
    assert time.monotonic() - start < 20


def test_wide_records_ingest_in_linear_time(tmp_path, store):
    keys = [f"k{i}" for i in range(3000)]
    path = write_lines(
        tmp_path / "wide.jsonl", [json.dumps({"step": s, "loss": 1.0, **{k: 0.5 for k in keys}}) for s in range(20)]
    )
    start = time.monotonic()
    ingest_paths([path], "r", store)
    assert time.monotonic() - start < 20  # was quadratic in the key count: ~25 s for 3,000 keys
    assert store.table("r", "metrics").height == 20 * 3001


@pytest.mark.parametrize("kind", ["npz", "parquet"])
def test_decompression_bombs_are_refused_with_one_line(tmp_path, store, monkeypatch, kind):
    import numpy as np

    from spikeforensics.ingest import IngestError
    from spikeforensics.ingest import _tables as T

    monkeypatch.setattr(T, "RATIO_CHECK_FROM_BYTES", 1 << 20)  # the same bomb, 1,000x smaller
    n = 2_000_000
    if kind == "npz":
        path = tmp_path / "grads.npz"
        np.savez_compressed(path, step=np.zeros(n, dtype=np.int64), layer=np.array(["a"]), grad_norm=np.zeros(n))
    else:
        path = tmp_path / "batches.parquet"
        pl.DataFrame({"step": np.zeros(n, dtype=np.int64), "sample_id": ["x"] * n}).write_parquet(
            path, compression="zstd", use_pyarrow=True, pyarrow_options={"use_dictionary": False}
        )
    with pytest.raises(IngestError, match=r"expands [\d,]+x .*at most 200x"):
        ingest_paths([path], "r", store)
    monkeypatch.setattr(T, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    monkeypatch.setattr(T, "RATIO_CHECK_FROM_BYTES", 1 << 40)
    with pytest.raises(IngestError, match=r"expands to [\d,]+ bytes; at most 1,048,576"):
        ingest_paths([path], "r", store)


# -- 8. kill -9 inside the commit (the store's SPIKEFORENSICS_KILL_AT hook) ------------------------


def _killed_ingest(tmp_path, root, point, path, run="k"):
    import signal
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "spikeforensics", "ingest", str(path), "--run", run, "--store", str(root)],
        env={**os.environ, "SPIKEFORENSICS_KILL_AT": point},
        capture_output=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def _direct_rows(root, table="metrics"):
    """Rows per run as the direct read of docs/store.md sees them."""
    frame = pl.read_parquet(str(root / "tables" / table / "**" / "*.parquet"), hive_partitioning=True)
    return dict(frame.group_by("run").len().iter_rows())


def _staged(root):
    return [*(root / ".tmp").rglob("*"), *(root / "tables").rglob(".*.pending"), *(root / "runs").rglob(".*.tmp")]


@pytest.mark.parametrize(
    "point, whole",
    [("data_pending:2", False), ("before_manifest:1", False), ("after_manifest:1", True), ("data_renamed:1", True)],
)
def test_kill_inside_the_commit_leaves_the_run_absent_or_whole(tmp_path, runner, point, whole):
    from spikeforensics.store import Store

    root = tmp_path / "st"
    log = write_lines(tmp_path / "train.log", [*_nanogpt(20), "saving checkpoint to out"])  # metrics and events
    ingest_paths([write_lines(tmp_path / "base.log", _nanogpt(10))], "base", Store(root))
    _killed_ingest(tmp_path, root, point, log)
    if not whole:  # before the commit point nothing of it is visible, not even to the direct read
        assert _direct_rows(root) == {"base": 30}  # 10 records x (loss, time, mfu)
    assert runner.invoke(cli, ["runs", "--store", str(root)]).exit_code == 0  # the next command
    assert _staged(root) == []
    st = Store(root)
    assert st.table("base", "metrics").height == 30
    assert _direct_rows(root) == {"base": 30, **({"k": 60} if whole else {})}
    assert (st.table("k", "metrics").height, st.table("k", "events").height) == ((60, 1) if whole else (0, 0))
    ingest_paths([log], "k", st)  # and the same ingest again completes it
    assert _direct_rows(root) == {"base": 30, "k": 60} and st.table("k", "events").height == 1


def test_kill_while_replacing_a_grown_file_never_shows_both_copies(tmp_path):
    from spikeforensics.store import Store

    root = tmp_path / "st"
    log = write_lines(tmp_path / "train.log", _nanogpt(20))
    ingest_paths([log], "r", Store(root))
    write_lines(log, _nanogpt(30))
    _killed_ingest(tmp_path, root, "drop_data_removed:1", log, run="r")
    assert _direct_rows(root) == {"r": 90}  # 30 records x 3 metrics: the old copy's rows are gone already
    st = Store(root)
    assert _losses(st, "r").get_column("step").to_list() == list(range(30))
    ingest_paths([log], "r", st)  # the next ingest of that file removes the old manifest row
    assert st.sources("r").height == 1
    assert len(list((root / "tables" / "sources" / "run=r").glob("*.parquet"))) == 1


def test_report_temporaries_of_a_killed_diagnose_are_swept(tmp_path, runner):
    import subprocess
    import sys

    from spikeforensics.store import Store, temp_path

    root = tmp_path / "st"
    ingest_paths([write_lines(tmp_path / "train.log", _nanogpt(20))], "r", Store(root))
    report = Store(root).run_dir("r") / "report.html"
    report.parent.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process that is gone
    leftover = temp_path(report).with_name(temp_path(report).name.replace(f"-{os.getpid()}.", f"-{pid}."))
    leftover.write_text("<html>half a report")
    mine = temp_path(report.with_name("report.json"))  # a live process's (this one): kept
    mine.write_text("{")
    foreign = report.with_name(".report.md.otherhost-1.tmp")  # another host's, fresh: kept
    foreign.write_text("#")
    assert runner.invoke(cli, ["runs", "--store", str(root)]).exit_code == 0
    assert not leftover.exists() and mine.exists() and foreign.exists()
