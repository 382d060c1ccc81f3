"""Side files: per-layer / global gradient dumps (CSV, JSONL, Parquet, NPZ), batch
manifests, telemetry (nvidia-smi, dmon, DCGM), kernel logs, TensorBoard, W&B exports;
and telling JSONL metrics / layer dumps / batch manifests apart by their keys."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from spikeforensics.ingest import IngestError, aliases, detect_format, ingest_paths, parse_file
from spikeforensics.store import Store


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


LAYER_ROWS = [
    {"step": 1, "rank": 0, "layer": "h.0.attn", "grad_norm": 0.5, "zero_frac": 0.0, "pos_frac": 0.5, "max_abs": 0.1},
    {
        "step": 1,
        "rank": 0,
        "layer": "h.1.attn",
        "grad_norm": float("nan"),
        "zero_frac": 0.0,
        "pos_frac": 0.5,
        "max_abs": float("inf"),
    },
    {"step": 2, "rank": 1, "layer": "h.0.attn", "grad_norm": 0.7, "zero_frac": 0.1, "pos_frac": 0.4, "max_abs": 0.2},
]


def check_layers(layers: pl.DataFrame) -> None:
    layers = layers.sort("step", "layer")
    assert layers.get_column("layer").to_list() == ["h.0.attn", "h.1.attn", "h.0.attn"]
    assert layers.get_column("rank").to_list() == [0, 0, 1]
    assert math.isnan(layers.item(1, "grad_norm")) and layers.item(1, "max_abs") == math.inf
    assert layers.item(2, "zero_frac") == 0.1


def test_layer_dump_csv_jsonl_parquet_npz(tmp_path):
    frame = pl.DataFrame(LAYER_ROWS)
    csv = tmp_path / "grads.csv"
    frame.write_csv(csv)
    jsonl = write(tmp_path, "layer_grads.jsonl", "\n".join(json.dumps(r) for r in LAYER_ROWS) + "\n")
    pq = tmp_path / "grads.parquet"
    frame.write_parquet(pq)
    npz = tmp_path / "grads.npz"
    np.savez(npz, **{k: np.asarray(frame.get_column(k).to_list()) for k in frame.columns})
    for path in (csv, jsonl, pq, npz):
        assert detect_format(path)[0] == "layers", path
        check_layers(parse_file(path, "layers").tables["layers"])
    assert parse_file(csv, "layers").tables["layers"].get_column("line").to_list() == [2, 3, 4]


def test_layer_dump_aliases_and_matrix_npz(tmp_path):
    path = write(tmp_path, "dump.csv", "iteration,param,grad_l2,numel\n5,wte,1.5,100\n5,h.0,0.25,10\n")
    layers = parse_file(path, "layers").tables["layers"]
    assert layers.get_column("grad_norm").to_list() == [1.5, 0.25] and layers.get_column("numel").to_list() == [100, 10]
    npz = tmp_path / "m.npz"
    np.savez(npz, steps=np.array([1, 2]), layers=np.array(["a", "b", "c"]), grad_norm=np.arange(6.0).reshape(2, 3))
    out = parse_file(npz, "layers").tables["layers"].sort("step", "layer")
    assert out.get_column("grad_norm").to_list() == [0, 1, 2, 3, 4, 5]
    assert out.get_column("step").to_list() == [1, 1, 1, 2, 2, 2]


def test_npz_without_needed_arrays_is_a_one_line_error(tmp_path):
    npz = tmp_path / "bad.npz"
    np.savez(npz, weights=np.zeros(3))
    with pytest.raises(IngestError) as err:
        parse_file(npz, "layers")
    msg = str(err.value)
    assert "\n" not in msg and "bad.npz" in msg and "step" in msg and "weights" in msg
    pickled = tmp_path / "obj.npz"
    np.savez(pickled, step=np.array([1]), layer=np.array([{"x": 1}], dtype=object), grad_norm=np.array([1.0]))
    with pytest.raises(IngestError, match="pickled"):
        parse_file(pickled, "layers")


def test_global_grad_dump_becomes_metrics(tmp_path):
    path = write(
        tmp_path,
        "gnorm.csv",
        "step,rank,grad_norm,grad_norm_clipped\n1,0,0.5,0.5\n1,1,0.6,0.6\n2,0,3.5,1.0\n2,1,nan,1.0\n",
    )
    assert detect_format(path)[0] == "layers"
    r = parse_file(path, "layers")
    m = r.tables["metrics"]
    gn = m.filter(pl.col("name") == "grad_norm").sort("line")
    assert gn.get_column("rank").to_list() == [0, 1, 0, 1] and gn.get_column("step").to_list() == [1, 1, 2, 2]
    assert set(m.get_column("name")) == {"grad_norm", "grad_norm_clipped"}
    assert r.tables["events"].filter(pl.col("kind") == "nan").item(0, "rank") == 1


def test_batch_manifest_per_step_lists(tmp_path):
    rows = [
        '{"step": 1, "rank": 0, "micro": 0, "sample_ids": ["s-001", "s-002"], "sample_losses": [2.1, NaN], "tokens": 100}',
        '{"step": 1, "rank": 1, "micro": 1, "sample_ids": ["s-003"], "sample_losses": [Infinity], "tokens": 40}',
        '{"step": 2, "rank": 0, "micro": 0, "sample_ids": [7, 8], "sample_losses": [1.0, 2.0], "tokens": 10}',
    ]
    path = write(tmp_path, "batches.jsonl", "\n".join(rows) + "\n")
    assert detect_format(path)[0] == "batches"
    b = parse_file(path, "batches").tables["batches"]
    assert b.get_column("sample_id").to_list() == ["s-001", "s-002", "s-003", "7", "8"]
    assert b.get_column("micro").to_list() == [0, 0, 1, 0, 0]
    losses = b.get_column("sample_loss").to_list()
    assert losses[0] == 2.1 and math.isnan(losses[1]) and losses[2] == math.inf
    assert b.get_column("tokens").to_list() == [50, 50, 40, 5, 5]  # row total shared by its samples
    assert b.get_column("line").to_list() == [1, 1, 2, 3, 3]


def test_batch_manifest_per_sample_csv_and_parquet(tmp_path):
    path = write(
        tmp_path, "samples.csv", "step,rank,sample_id,sample_loss,tokens,source\n1,0,a,1.5,100,web\n1,0,b,nan,50,code\n"
    )
    b = parse_file(path, "batches").tables["batches"]
    assert b.get_column("sample_source").to_list() == ["web", "code"] and b.get_column("tokens").to_list() == [100, 50]
    pq = tmp_path / "m.parquet"
    pl.DataFrame({"step": [3], "sample_ids": [["x", "y"]], "sample_losses": [[0.5, 0.25]]}).write_parquet(pq)
    assert detect_format(pq)[0] == "batches"
    b = parse_file(pq, "batches").tables["batches"]
    assert b.get_column("sample_id").to_list() == ["x", "y"] and b.get_column("sample_loss").to_list() == [0.5, 0.25]
    semi = write(tmp_path, "semi.csv", "step,sample_ids\n4,a;b;c\n")
    assert parse_file(semi, "batches").tables["batches"].get_column("sample_id").to_list() == ["a", "b", "c"]


def test_jsonl_kinds_told_apart_by_keys(tmp_path):
    metrics = write(
        tmp_path, "m.jsonl", '{"step": 1, "loss": 2.0, "grad_norm": 0.5}\n{"step": 2, "loss": 1.9, "grad_norm": 0.4}\n'
    )
    layers = write(tmp_path, "l.jsonl", '{"step": 1, "layer": "a", "grad_norm": 0.5}\n')
    batches = write(tmp_path, "b.jsonl", '{"step": 1, "sample_ids": ["a"]}\n')
    assert detect_format(metrics)[0] == "jsonl_metrics"
    assert detect_format(layers)[0] == "layers"
    assert detect_format(batches)[0] == "batches"


def test_user_alias_toml_extends_layer_columns(tmp_path, monkeypatch):
    toml = write(tmp_path, "aliases.toml", '[layer_columns]\n"Block Name" = "layer"\n')
    path = write(tmp_path, "custom.csv", "step,Block Name,grad_norm\n1,blk0,0.5\n")
    monkeypatch.setitem(aliases.LAYER_COLUMN_ALIASES, "placeholder", "placeholder")  # restore the table after
    saved = dict(aliases.LAYER_COLUMN_ALIASES)
    try:
        aliases.load_user_aliases(toml)
        assert parse_file(path, "layers").tables["layers"].get_column("layer").to_list() == ["blk0"]
    finally:
        aliases.LAYER_COLUMN_ALIASES.clear()
        aliases.LAYER_COLUMN_ALIASES.update(saved)


def test_wandb_csv_and_history_jsonl(tmp_path):
    csv = write(
        tmp_path,
        "wandb_export.csv",
        '"_step","_runtime","_timestamp","train/loss","train/global_step","eval/loss"\n'
        "0,10,1700000000,2.5,10,\n1,20,1700000010,2.4,20,\n2,25,1700000015,,20,2.2\n",
    )
    assert detect_format(csv)[0] == "csv_metrics"
    m = parse_file(csv, "csv_metrics").tables["metrics"]
    loss = m.filter(pl.col("name") == "loss").sort("line")
    assert loss.get_column("step").to_list() == [10, 20]  # train/global_step, not _step
    assert str(loss.item(0, "time")) == "2023-11-14 22:13:20"
    ev = m.filter(pl.col("name") == "eval_loss")
    assert ev.item(0, "step") == 20 and ev.item(0, "record") is None
    hist = write(
        tmp_path,
        "wandb-history.jsonl",
        '{"_step": 0, "_timestamp": 1700000000.5, "train/loss": 2.5, "train/global_step": 10, "_wandb": {"runtime": 1}}\n'
        '{"_step": 1, "train/loss": NaN, "train/global_step": 20}\n',
    )
    m = parse_file(hist, "jsonl_metrics").tables["metrics"]
    assert m.filter(pl.col("name") == "loss").get_column("step").to_list() == [10, 20]
    assert set(m.get_column("name")) == {"loss"}


def test_fairseq_json_strings_behind_logger_prefix(tmp_path):
    rows = [
        '2020-07-01 12:00:00 | INFO | train_inner | {"epoch": 1, "update": 0.45, "loss": "11.521", "gnorm": "1.543", "num_updates": "445", "lr": "8.9e-05"}',
        '2020-07-01 12:00:10 | INFO | train_inner | {"epoch": 1, "update": 0.5, "loss": "nan", "gnorm": "inf", "num_updates": "500", "lr": "9e-05"}',
        '2020-07-01 12:00:20 | INFO | train_inner | {"epoch": 1, "update": 0.6, "loss": "9.1", "gnorm": "1.1", "num_updates": "600", "lr": "9e-05"}',
    ]
    path = write(tmp_path, "fairseq.log", "\n".join(rows) + "\n")
    m = parse_file(path, "jsonl_metrics").tables["metrics"]
    loss = m.filter(pl.col("name") == "loss").sort("line")
    assert loss.get_column("step").to_list() == [445, 500, 600] and loss.item(0, "value") == 11.521
    assert m.filter(pl.col("name") == "grad_norm").sort("line").item(1, "value") == math.inf


def test_nvidia_smi_repeated_headers_units_na(tmp_path):
    hdr = (
        "timestamp, index, pci.bus_id, temperature.gpu, power.draw [W], "
        "ecc.errors.corrected.volatile.total, ecc.errors.uncorrected.volatile.total"
    )
    text = (
        "\n".join(
            [
                hdr,
                "2024/01/31 12:00:00.123, 0, 00000000:3B:00.0, 61, 250.12 W, 0, 0",
                "2024/01/31 12:00:00.123, 1, 00000000:5E:00.0, 63, [N/A], 3, 0",
                hdr,
                "2024/01/31 12:00:01.125, 0, 00000000:3B:00.0, 62, 251.00 W, 0, 1",
            ]
        )
        + "\n"
    )
    path = write(tmp_path, "telemetry.csv", text)
    assert detect_format(path)[0] == "telemetry"
    t = parse_file(path, "telemetry").tables["telemetry"]
    assert t.filter((pl.col("gpu") == 1) & (pl.col("field") == "power")).height == 0  # [N/A]: no row
    ecc = t.filter(pl.col("field") == "ecc_uncorrected").sort("line")
    assert ecc.get_column("value").to_list() == [0, 0, 1]
    assert str(ecc.item(2, "time")) == "2024-01-31 12:00:01.125000"
    assert set(t.get_column("field")) == {"temperature", "power", "ecc_corrected", "ecc_uncorrected"}


def test_nvidia_smi_noheader_needs_the_query_and_reads_with_it(tmp_path, monkeypatch):
    rows = [
        "2024/01/31 12:00:00.123, 0, 61, 250.12, 0",
        "2024/01/31 12:00:00.123, 1, 63, 251.50, 0",
        "2024/01/31 12:00:10.125, 1, 64, 249.00, 2",
    ]
    path = write(tmp_path, "smi.csv", "\n".join(rows) + "\n")
    monkeypatch.setattr(aliases, "SMI_QUERY", [])
    assert detect_format(path)[0] == "telemetry"
    with pytest.raises(IngestError, match=r"smi.csv:1: nvidia-smi CSV without a header row .*\[nvidia_smi\] query"):
        parse_file(path, "telemetry")
    toml = write(
        tmp_path,
        "aliases.toml",
        '[nvidia_smi]\nquery = "timestamp,index,temperature.gpu,power.draw,ecc.errors.uncorrected.volatile.total"\n',
    )
    aliases.load_user_aliases(toml)
    t = parse_file(path, "telemetry").tables["telemetry"]
    assert set(t.get_column("field")) == {"temperature", "power", "ecc_uncorrected"}
    ecc = t.filter((pl.col("field") == "ecc_uncorrected") & (pl.col("gpu") == 1)).sort("line")
    assert ecc.get_column("value").to_list() == [0, 2] and ecc.get_column("line").to_list() == [2, 3]
    # a query naming another number of fields than the rows have
    monkeypatch.setattr(aliases, "SMI_QUERY", ["timestamp", "index"])
    with pytest.raises(IngestError, match=r"smi.csv:1: 5 fields, but the \[nvidia_smi\] query names 2"):
        parse_file(path, "telemetry")
    bad = write(tmp_path, "bad.toml", "[nvidia_smi]\nquery = 3\n")
    with pytest.raises(ValueError, match=r"bad.toml: \[nvidia_smi\] takes one key"):
        aliases.load_user_aliases(bad)


def test_dmon_and_dcgm(tmp_path):
    dmon = write(
        tmp_path,
        "dmon.txt",
        "# gpu   pwr gtemp mtemp    sm   mem\n# Idx     W     C     C     %     %\n"
        "    0    43    34     -     0     0\n    1    45    36     -     3     0\n",
    )
    assert detect_format(dmon)[0] == "telemetry"
    t = parse_file(dmon, "telemetry").tables["telemetry"]
    assert t.filter((pl.col("gpu") == 1) & (pl.col("field") == "power")).item(0, "value") == 45
    assert "temperature_memory" not in set(t.get_column("field"))  # '-' is no value
    dcgmi = write(
        tmp_path,
        "dcgmi.txt",
        "#Entity   TMPTR  POWER  XIDER\nID        C      W\n"
        "GPU 0     45     70.1   0\nGPU 1     47     N/A    0\nGPU 0     46     71.0   79\n",
    )
    r = parse_file(dcgmi, "telemetry")
    assert r.tables["telemetry"].filter(pl.col("field") == "temperature").get_column("value").to_list() == [45, 47, 46]
    assert json.loads(r.tables["events"].item(0, "detail"))["code"] == 79
    prom = write(
        tmp_path,
        "prom.txt",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="node1"} 45\n'
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-b",Hostname="node1",err_code="79"} 79 1706702400000\n',
    )
    r = parse_file(prom, "telemetry")
    t = r.tables["telemetry"]
    assert t.get_column("host").to_list() == ["node1", "node1"] and t.get_column("field").to_list() == [
        "temperature",
        "xid",
    ]
    assert r.tables["events"].height == 1


def test_syslog_xid_takes_the_runs_year(tmp_path):
    log = write(tmp_path, "train.jsonl", '{"step": 1, "loss": 2.0, "timestamp": 1707890000}\n')
    kern = write(
        tmp_path,
        "kern.log",
        "Feb 14 05:03:41 node7 kernel: [ 1843.308145] NVRM: Xid (PCI:0000:3B:00): 48, pid=123, name=python, DBE\n"
        "Feb 14 05:03:42 node7 kernel: some other line\n",
    )
    assert detect_format(kern)[0] == "kernel"
    store = Store(tmp_path / "s")
    ingest_paths([kern, log], "r", store)
    ev = store.table("r", "events").filter(pl.col("kind") == "xid")
    d = json.loads(ev.item(0, "detail"))
    assert d["code"] == 48 and d["pci"] == "0000:3b:00" and d["host"] == "node7"
    assert str(ev.item(0, "time")) == "2024-02-14 05:03:41"
    # alone (no year known) the time is left null, with a note
    r = parse_file(kern, "kernel")
    assert r.tables["events"].item(0, "time") is None and r.notes


def test_iso_dmesg_time(tmp_path):
    kern = write(
        tmp_path,
        "dmesg.txt",
        "2024-01-15T03:00:00,123456+00:00 NVRM: Xid (PCI:0000:b3:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
        "2024-01-15T03:00:00,200000+00:00 NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "               NVRM: fallen off the bus and is not responding to commands.\n",
    )
    ev = parse_file(kern, "kernel").tables["events"]
    assert ev.height == 1  # the inferred 79 is dropped: a real Xid 79 names the same GPU
    assert str(ev.item(0, "time")) == "2024-01-15 03:00:00.123456"


def test_tensorboard_event_file(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path))
    for step, loss in enumerate([2.0, 1.9, float("nan"), 1.7], start=1):
        vals = [
            summary_pb2.Summary.Value(tag="train/loss", simple_value=loss),
            summary_pb2.Summary.Value(tag="train/grad_norm", simple_value=0.5 * step),
            summary_pb2.Summary.Value(tag="lm loss vs samples", simple_value=loss),
        ]
        writer.add_event(event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=vals)))
    writer.add_event(
        event_pb2.Event(
            wall_time=1.7e9 + 9,
            step=9,
            summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="eval/loss", simple_value=1.5)]),
        )
    )
    writer.close()
    path = next(tmp_path.glob("events.out.tfevents.*"))
    assert detect_format(path)[0] == "tensorboard"
    r = parse_file(path, "tensorboard")
    m = r.tables["metrics"]
    loss = m.filter(pl.col("name") == "loss").sort("step")
    assert loss.get_column("step").to_list() == [1, 2, 3, 4] and math.isnan(loss.item(2, "value"))
    assert set(m.get_column("name")) == {"loss", "grad_norm", "eval_loss"}
    assert m.filter(pl.col("name") == "eval_loss").item(0, "record") is None
    assert r.tables["events"].filter(pl.col("kind") == "nan").item(0, "step") == 3


def test_tensorboard_missing_gives_install_hint(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *a, **k):
        if name.startswith("tensorboard"):
            raise ImportError("no tensorboard")
        return real_import(name, *a, **k)

    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b'\x18\x00\x00\x00\x00\x00\x00\x00\xa3\x7fK"\t\x00\x00\x00\x00\x00\x00\x00\x00\x1a\rbrain.Event:2')
    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(IngestError) as err:
        parse_file(path, "tensorboard")
    assert "pip install 'spikeforensics[tensorboard]'" in str(err.value) and str(path) in str(err.value)


def test_docs_list_every_alias():
    doc = (Path(__file__).parents[1] / "docs" / "formats.md").read_text(encoding="utf-8")
    for table in (
        aliases.METRIC_ALIASES,
        aliases.LAYER_COLUMN_ALIASES,
        aliases.BATCH_COLUMN_ALIASES,
        aliases.TELEMETRY_FIELD_ALIASES,
    ):
        for alias, canonical in table.items():
            assert f"`{alias}`" in doc and f"`{canonical}`" in doc, alias


def test_batch_manifest_with_dataset_indices_and_lengths(tmp_path):
    # an OLMo-style dump: data-parallel rank, dataset indices and per-document lengths per micro-batch
    rows = [
        '{"global_step": 5, "dp_rank": 1, "micro_batch_idx": 0, "indices": [1201, 1202], "lengths": [512, 0], '
        '"per_sample_losses": [2.5, NaN], "domain": "web"}'
    ]
    path = write(tmp_path, "data_indices.jsonl", "\n".join(rows) + "\n")
    assert detect_format(path)[0] == "batches"
    b = parse_file(path, "batches").tables["batches"]
    assert b.get_column("sample_id").to_list() == ["1201", "1202"] and b.get_column("rank").to_list() == [1, 1]
    assert b.get_column("tokens").to_list() == [512, 0] and b.get_column("sample_source").to_list() == ["web", "web"]
    assert b.get_column("step").to_list() == [5, 5] and math.isnan(b.get_column("sample_loss")[1])
    per_sample = write(tmp_path, "docs.csv", "step,doc_id,token_count\n7,d-1,300\n7,d-2,12\n")
    b = parse_file(per_sample, "batches").tables["batches"]
    assert b.get_column("sample_id").to_list() == ["d-1", "d-2"] and b.get_column("tokens").to_list() == [300, 12]


def test_per_rank_side_files_take_the_rank_in_their_name(tmp_path):
    from spikeforensics.ingest import rank_from_name

    assert rank_from_name("batches_rank3.jsonl") == 3 and rank_from_name("grads-rank_12.csv") == 12
    assert rank_from_name("node1.rank-0.parquet") == 0 and rank_from_name("batches.jsonl") is None
    assert rank_from_name("frank2.csv") is None and rank_from_name("rank1_to_rank2.csv") is None
    for r in (0, 1):
        write(
            tmp_path,
            f"batches_rank{r}.jsonl",
            "\n".join(json.dumps({"step": s, "sample_ids": [f"r{r}-s{s}"]}) for s in (1, 2)) + "\n",
        )
        write(tmp_path, f"layers_rank{r}.csv", f"step,layer,grad_norm\n1,h.0,0.{5 + r}\n")
    # a rank column wins over the name
    write(tmp_path, "batches_rank5.jsonl", '{"step": 3, "rank": 7, "sample_ids": ["x"]}\n')
    store = Store(tmp_path / "store")
    ingest_paths(
        [
            tmp_path / n
            for n in (
                "batches_rank0.jsonl",
                "batches_rank1.jsonl",
                "layers_rank0.csv",
                "layers_rank1.csv",
                "batches_rank5.jsonl",
            )
        ],
        "r",
        store,
    )
    b = store.table("r", "batches").sort("sample_id")
    assert dict(zip(b.get_column("sample_id"), b.get_column("rank"))) == {
        "r0-s1": 0,
        "r0-s2": 0,
        "r1-s1": 1,
        "r1-s2": 1,
        "x": 7,
    }
    assert sorted(store.table("r", "layers").get_column("rank").to_list()) == [0, 1]


def test_user_aliases_apply_to_one_ingest_only(tmp_path):
    from spikeforensics import api
    from spikeforensics.ingest import aliases

    toml = tmp_path / "aliases.toml"
    toml.write_text('[metrics]\nmy_special_loss = "loss"\n')
    log = tmp_path / "m.jsonl"
    log.write_text("".join(f'{{"step": {s}, "my_special_loss": {2 - s / 100}}}\n' for s in range(1, 20)))
    api.ingest([log], run_id="with", store=tmp_path / "s", aliases=toml)
    assert "my_special_loss" not in aliases.METRIC_ALIASES  # restored after the ingest
    api.ingest([log], run_id="without", store=tmp_path / "s")
    names_with = set(api.export("with", "metrics", store=tmp_path / "s").get_column("name"))
    names_without = set(api.export("without", "metrics", store=tmp_path / "s").get_column("name"))
    assert "loss" in names_with and "loss" not in names_without
