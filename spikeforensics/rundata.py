"""A run loaded from the store, with the series views that detectors and the report use.

`RunData` holds the five data tables and the sources manifest of one run as polars
frames. Detectors never read files: they take a `RunData` (or a hand-made one in
tests, see `RunData.from_frames`) and return findings.

The long metrics table of a run loaded from a store is held as a lazy scan of its Parquet
files when it has more than `EAGER_METRIC_ROWS` rows (issues 14/16: a 10M-step run's table is
~4 GB in memory): `metrics` is then a `pl.LazyFrame`, so readers query it through
`run.metrics.lazy()` (a no-op on a LazyFrame) and take out only the rows and columns they need.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field

import polars as pl

from spikeforensics import schema
from spikeforensics.frames import in_order, one_group, ordered, rows_where

# A loss is a signed objective (no ratio scale) when this share of its finite records or more is negative. A few
# stray negative prints among positive losses are broken printing, not a signed objective: a Jittor pix2pixHD
# loop's MSE prints -319.3, -0.51, -0.23 (6 of 239 records) between ordinary values 0.1-2.9 and spikes to 19-32;
# a PPO/actor loss or a flow's NLL bound is negative on a large share of its records (a third or more)
SIGNED_MIN_SHARE = 0.05

# The two sides of a GAN's losses, as normalised metric names hold them (`g_loss` / `d_loss`,
# `loss_g` / `loss_d`, StyleGAN's `loss_g_loss` / `loss_d_loss`, `gen_loss` / `disc_loss`, WGAN's critic)
ADVERSARIAL_SIDES = (
    r"(?:^|_)(?:g|gen|generator|netg)(?:_|$)",
    r"(?:^|_)(?:d|disc|discriminator|netd|critic)(?:_|$)",
)


# a total of several loss terms printed beside them (AcademiCodec's `total_loss_g` beside `feat_loss`, `rec_loss`,
# `adv_g_loss`): the loss that is back-propagated, so it stands for the loss before any one term
TOTAL_LOSS = r"(?:^|_)(?:total_loss|loss_total)(?:_|$)"
# auxiliary loss terms, by name: distillation, MoE load balancing / router z-loss, regularisation (not a KL to a
# reference policy: in an RL fine-tune it is the policy's drift, the signal to judge beside a policy loss at 0)
AUXILIARY_LOSS = r"(?:^|_)(?:kd|distill|distillation|aux|auxiliary|balance|router|z|reg|regularization|l2)(?:_|$)"


# why: ~80 bytes a row in memory, so up to ~160 MB eager; above, each query scans the Parquet files
# (only the columns it reads, the row groups its filter keeps)
# the bookkeeping of a reinforcement-learning loop (SB3/tianshou/PyMARL/AlphaZero-style logs): a run that logs one
# trains on data its own policy generates
RL_STATS = r"(?:^|_)(?:explained_var\w*|ep_len_mean|ep_rew_mean|episode_len\w*|episode_reward\w*|return_mean|env_step)$"
EAGER_METRIC_ROWS = 2_000_000
# a policy's objective by its name (a PPO/GRPO actor's, a policy-gradient or preference loss): its level says nothing
# of the run's health
POLICY_LOSS = r"(?:^|_)(?:actor|policy|pg|ppo|grpo|dpo|reward)(?:_|$)"
# an actor's objective, named so (`actor_loss`, `policy_loss`, `pg_loss`, `policy_gradient_loss`)
ACTOR_LOSS = r"(?:^|_)(?:actor|policy|pg)(?:_|$)"


@dataclass
class RunData:
    run_id: str
    metrics: pl.DataFrame | pl.LazyFrame  # lazy for a big run loaded from a store (EAGER_METRIC_ROWS)
    events: pl.DataFrame
    layers: pl.DataFrame
    batches: pl.DataFrame
    telemetry: pl.DataFrame
    sources: pl.DataFrame
    _cache: dict = field(default_factory=dict, repr=False)
    # attempts of the run as read that this view of it leaves out (report.charts.drawn_run), for the charts' notes
    attempts_left_out: int = 0

    @classmethod
    def load(cls, store, run_id: str) -> RunData:
        tables = {t: store.table(run_id, t) for t in schema.DATA_TABLES if t != "metrics"}
        metrics = store.scan(run_id, "metrics")
        if metrics.select(pl.len()).collect().item() <= EAGER_METRIC_ROWS:
            metrics = store.table(run_id, "metrics")
        return cls(run_id=run_id, sources=store.sources(run_id), metrics=metrics, **tables)

    @classmethod
    def from_frames(cls, run_id: str = "test", **frames: pl.DataFrame) -> RunData:
        """Build a run from hand-made frames (missing tables are empty, columns conformed)."""
        tables = {}
        for table in (*schema.DATA_TABLES, "sources"):
            frame = frames.get(table)
            tables[table] = schema.empty(table) if frame is None else schema.conform(table, frame)
        return cls(run_id=run_id, **tables)

    # -- runs appended to one log ---------------------------------------------------
    def _attempt_openings(self, source: str, name: str) -> pl.DataFrame:
        """Per attempt of `source`, in attempt order: the first step and value of the loss `name` (by record),
        the first epoch, and the median of its finite values. One small query per column: each streams over the
        table (a sort of the table, or filters inside one aggregation, held a 7.2M-record log whole: 1.9 GB)."""
        rows = self.metrics.lazy().filter(pl.col("source") == source, pl.col("record").is_not_null())
        loss = rows.filter(pl.col("name") == name)

        def first(frame: pl.LazyFrame, column: str, alias: str) -> pl.DataFrame:
            return frame.group_by("attempt").agg(pl.col(column).sort_by("record").first().alias(alias)).collect()

        median = (
            loss.filter(pl.col("value").is_finite())
            .group_by("attempt")
            .agg(pl.col("value").median().alias("median"))
            .collect()
        )
        out = first(loss.filter(pl.col("step").is_not_null()), "step", "step")  # the first step printed
        for part in (first(rows.filter(pl.col("name") == "epoch"), "value", "epoch"), first(loss, "value", "first")):
            out = out.join(part, on="attempt", how="full", coalesce=True)
        return out.join(median, on="attempt", how="full", coalesce=True).sort("attempt")

    def fresh_starts(self) -> list[int]:
        """The attempts that begin a new run from scratch (always 0 first). A second run of the same script
        appended to the same log (a loguru file, MACE's results file) starts again from the beginning: its
        first step is no later than attempt 0's and its epoch goes back to attempt 0's first (in a log that
        prints one); without an epoch, it prints attempt 0's first loss at attempt 0's first step (a log appended
        to itself), or its loss starts again at the untrained level, at least half of attempt 0's first loss and
        twice the previous attempt's median. A resume goes back only to its checkpoint, and a
        per-epoch counter restarts while the epoch moves on and the loss stays where training had brought it."""
        key = ("fresh_starts",)
        if key not in self._cache:
            starts = [0]
            source, name = self.primary_source("loss"), self.resolve("loss")
            if source is not None:
                rows = self._attempt_openings(source, name)
                if rows.height > 1:
                    a0 = rows.row(0, named=True)
                    prev_median = a0["median"]
                    for r in rows.slice(1).iter_rows(named=True):
                        back = (r["step"] is not None and a0["step"] is not None and r["step"] <= a0["step"]) or (
                            a0["step"] is None and r["epoch"] is not None and a0["epoch"] is not None
                        )
                        # the same first step and the same first loss as attempt 0: the run started again (a log
                        # appended to itself, a re-run with the same seed), whatever its loss did before; a resume
                        # does not print the untrained run's first value at its first step
                        same_start = r["step"] == a0["step"] and r["first"] == a0["first"] and r["first"] is not None
                        if r["epoch"] is not None and a0["epoch"] is not None:
                            fresh = back and r["epoch"] <= a0["epoch"]
                        elif same_start:
                            fresh = True
                        else:
                            fresh = (
                                back
                                and None not in (r["first"], a0["first"], prev_median)
                                and r["first"] >= 0.5 * a0["first"]
                                and r["first"] >= 2 * prev_median
                            )
                        if fresh:
                            starts.append(int(r["attempt"]))
                        prev_median = r["median"]
            self._cache[key] = starts
        return self._cache[key]

    def attempts_between(self, lo: int, hi: int | None) -> RunData:
        """The run restricted to metrics and events of attempts lo <= a < hi (hi None: to the end); the
        other tables as they are."""
        return self.attempts_where(pl.col("attempt") >= lo if hi is None else pl.col("attempt").is_between(lo, hi - 1))

    def attempts_where(self, keep: pl.Expr) -> RunData:
        """The run restricted to metrics and events of the attempts `keep` holds for (events of no attempt kept);
        the other tables as they are."""
        return RunData(
            run_id=self.run_id,
            metrics=self.metrics.filter(keep),
            events=self.events.filter(keep | pl.col("attempt").is_null()),
            layers=self.layers,
            batches=self.batches,
            telemetry=self.telemetry,
            sources=self.sources,
        )

    # -- metric series -----------------------------------------------------------
    def metric_names(self) -> list[str]:
        return sorted(self.metrics.lazy().select(pl.col("name").unique()).collect().get_column("name").to_list())

    def engine(self):
        """A context in which `collect()` runs on polars' streaming engine when the metrics table is lazy: a query
        over the whole table (a group-by per record, a count per metric) then reads the Parquet files in morsels
        instead of taking its columns out whole (at 1M steps, the events detector's per-record query: 1.1 GB
        in memory, 0.46 GB streaming). A small, eager run keeps the default engine."""
        if isinstance(self.metrics, pl.DataFrame):
            return contextlib.nullcontext()
        return pl.Config(engine_affinity="streaming")

    def metric_rows(self) -> int:
        """Rows of the long metrics table (counted from the Parquet metadata when it is lazy)."""
        if isinstance(self.metrics, pl.DataFrame):
            return self.metrics.height
        return int(self.metrics.select(pl.len()).collect().item())

    def has_metric(self, name: str) -> bool:
        name = self.resolve(name)
        return self.metrics.lazy().filter(pl.col("name") == name).select(pl.len()).collect().item() > 0

    def resolve(self, name: str) -> str:
        """The metric that stands for `name`: itself, except `loss` in a run that logs no
        metric of that name but one training loss under another (`train/nll_loss`,
        `decode_loss_seg`): the training-record metric that totals the loss terms (`total_loss_g`),
        else one ending in `loss` (else holding it as a word), not an eval one, one that moves before one printed as 0 throughout (a term
        switched off), not an entropy term, non-negative before signed (a PPO policy loss is no loss curve to judge
        when the critic's is printed beside it), with the most records, the task's before an auxiliary term of as
        many (`task_loss` before `kd_loss`, `lm_loss` before `aux_loss`; its own name is kept in the store)."""
        if name != "loss":
            return name
        key = ("resolve", name)
        if key not in self._cache:
            self._cache[key] = name
            # a run that logs a `loss` on its records needs no look at the others (a group-by of every metric row
            # by name: 0.65 GB at 2M steps)
            logged = (
                self.metrics.lazy()
                .filter((pl.col("name") == "loss") & pl.col("record").is_not_null())
                .select(pl.len())
                .collect()
                .item()
            )
            finite = pl.when(pl.col("value").is_finite()).then(pl.col("value"))  # (null elsewhere: skipped)
            # a signed objective (an RL policy loss) is the loss only when no non-negative one is printed
            names = (
                self.metrics.lazy()  # lazily: only name and value are taken out of the long table
                .filter(pl.col("record").is_not_null())
                .group_by("name")
                .agg(
                    pl.len(),
                    (finite.min() < 0).fill_null(False).alias("signed"),
                    (finite.abs().max() == 0).fill_null(False).alias("off"),
                )
                .collect()
                if not logged
                else None
            )
            if names is not None:
                train = names.filter(
                    # (an eval metric's prefix as a word: `value_loss` is a critic's training loss)
                    ~pl.col("name").str.contains(r"^(?:eval|val|valid|validation|test)(?:_|$)")
                    & ~pl.col("name").str.starts_with("loss_scale")
                )
                # a total of the loss terms (`total_loss`, `loss_total`, a GAN generator's `total_loss_g`) before its
                # parts, then a name ending in `loss` (`train_nll_loss`), else one holding it (mmseg `decode_loss_seg`),
                # else one opening with it (a CamelCase `LossTrajs`, normalised as one word: `losstrajs`)
                for pattern in (TOTAL_LOSS, r"loss$", schema.LOSS_TERM, r"^loss[a-z]"):
                    # an entropy term (verl's `actor/entropy_loss`: the policy's entropy, a bonus, not what it fits)
                    # after every other loss
                    lossy = (
                        train.filter(pl.col("name").str.contains(pattern))
                        .with_columns(
                            pl.col("name").str.contains("entropy").alias("entropy"),
                            # an auxiliary term beside the task's loss (a distillation student's `kd_loss` next to its
                            # `task_loss`, a MoE router's `aux_loss`) after the others of as many records
                            pl.col("name").str.contains(AUXILIARY_LOSS).alias("auxiliary"),
                            # an actor's / policy-gradient objective after the critic's loss printed beside it, also
                            # when both are non-negative (ML-Agents' `Losses/Policy Loss` is its absolute value)
                            pl.col("name").str.contains(ACTOR_LOSS).alias("actor"),
                        )
                        .sort(
                            ["off", "entropy", "signed", "actor", "len", "auxiliary", "name"],
                            descending=[False, False, False, False, True, False, False],
                        )
                    )
                    if lossy.height:
                        self._cache[key] = lossy.get_column("name")[0]
                        break
                else:
                    # no loss printed, only its perplexity (tensorflow/nmt's `global step 100 lr 1 ... ppl 2.4e9`,
                    # OpenNMT's `Perplexity`): the loss is its log (`series` takes it), the training one with the
                    # most records
                    ppl = train.filter(pl.col("name").str.contains(schema.PERPLEXITY)).sort(
                        ["len", "name"], descending=[True, False]
                    )
                    if ppl.height:
                        self._cache[key] = ppl.get_column("name")[0]
        return self._cache[key]

    def loss_is_perplexity(self) -> bool:
        """The run prints no loss, only a training perplexity: `series("loss")` is its log."""
        return self.resolve("loss") != "loss" and re.search(schema.PERPLEXITY, self.resolve("loss")) is not None

    def primary_source(self, name: str) -> str | None:
        """The source that logs `name` for the most step records (the run's main log)."""
        name = self.resolve(name)
        counts = (
            self.metrics.lazy()
            .filter((pl.col("name") == name) & pl.col("record").is_not_null())
            .group_by("source")
            .agg(pl.len().alias("n"))
            .sort(["n", "source"], descending=[True, False])
            .collect()
        )
        return counts.get_column("source")[0] if counts.height else None

    def starts_at_start(self, start_max_step: int) -> bool:
        """The log begins at the start of training: its first step is <= `start_max_step`, or within one
        logging interval of step 0 (a first record at step 99 or 100 of a log printed every 100 steps, d3rlpy's
        first epoch mean at step 1000); without a step counter, a first epoch fraction printed below 0.05 (HF
        Trainer's `'epoch': 0.01`)."""
        first_step = self.step_range()[0]
        if first_step is None:
            epoch = self.series("epoch").filter(pl.col("value").is_finite()).get_column("value")
            return bool(epoch.len()) and 0 <= float(epoch[0]) < 0.05
        if first_step <= start_max_step:
            return True
        # the two smallest distinct steps (a unique() of a long run's steps is a hash set of every one)
        steps = self.series("loss").get_column("step").drop_nulls()
        s0 = steps.min()
        s1 = steps.filter(steps > s0).min() if s0 is not None else None
        return s1 is not None and first_step <= int(s1) - int(s0)

    def loss_is_critic(self) -> bool:
        """The run's loss is an RL critic's (`schema.VALUE_LOSS`): its bootstrapped targets start near 0 and grow
        with the policy's returns, so its rise over the first records is no unstable start."""
        return bool(re.search(schema.VALUE_LOSS, self.resolve("loss")))

    def loss_is_reinforcement(self) -> bool:
        """The run's loss is a reinforcement-learning loop's: a critic's (`loss_is_critic`), or any loss of a run that
        logs RL bookkeeping (`RL_STATS`: explained variance, episode length or return, env steps). Its data come
        from the policy being trained, so its level moves as the policy improves (self-play games get harder, a
        critic's targets grow with the returns): a slow drift of it is no sign of damage."""
        key = ("reinforcement", "loss")
        if key not in self._cache:
            self._cache[key] = self.loss_is_critic() or any(re.search(RL_STATS, n) for n in self.metric_names())
        return self._cache[key]

    def loss_is_policy(self) -> bool:
        """The run's loss is named as a policy's objective (`POLICY_LOSS`), whatever else the run logs."""
        return re.search(POLICY_LOSS, self.resolve("loss").lower()) is not None

    def loss_without_ratio(self) -> str | None:
        """Why the loss has no ratio scale for the spike and drift tests, else None:
        - "signed": it takes negative values on `SIGNED_MIN_SHARE` of its records or more (a PPO policy loss, a
          flow's NLL bound);
        - "adversarial": it is one side of a GAN's pair, a generator's loss printed beside a
          discriminator's (or the reverse): a game's scores rise as either side gains, so a rise is
          no drift and a doubling no spike (StyleGAN's `Loss/G/loss` beside `Loss/D/loss`)."""
        key = ("ratio-free", "loss")
        if key not in self._cache:
            loss = self.series("loss")
            why = None
            finite = loss.filter(pl.col("value").is_finite())
            negative = finite.filter(pl.col("value") < 0).height
            if negative and negative >= SIGNED_MIN_SHARE * finite.height:
                why = "signed"
            elif loss.height:
                name = self.resolve("loss")
                lossy = self.loss_term_names()
                for mine, other in (ADVERSARIAL_SIDES, ADVERSARIAL_SIDES[::-1]):
                    if re.search(mine, name) and any(re.search(other, n) and not re.search(mine, n) for n in lossy):
                        why = "adversarial"
                        break
            self._cache[key] = why
        return self._cache[key]

    def loss_term_names(self) -> list[str]:
        """The names of the training records' metrics that are losses or loss terms (`loss`, `l1_loss`,
        `loss_cls`), sorted; computed once (a query that takes out the name column only)."""
        key = ("loss-terms",)
        if key not in self._cache:
            names = (
                self.metrics.lazy()
                .filter(pl.col("record").is_not_null())
                .select(pl.col("name").unique())
                .collect()
                .get_column("name")
                .to_list()
            )
            self._cache[key] = sorted(n for n in names if schema.is_loss_name(n))
        return self._cache[key]

    def series(self, name: str, per_rank: bool = False) -> pl.DataFrame:
        """One metric as a training timeline from its primary source.

        Columns: `t` (0.. position in training order: attempt, then record), `step`,
        `attempt`, `rank`, `value`, `line`, `source`, `time`. Rows are step records only.
        With `per_rank=False` the global rows (rank null) are returned when there are any,
        else rank-level rows are kept as they are.
        """
        key = ("series", name, per_rank)
        if key in self._cache:
            return self._cache[key]
        name_asked = name
        source = self.primary_source(name)
        name = self.resolve(name)
        if source is None:
            out = pl.DataFrame(
                schema={
                    "t": pl.Int64,
                    "step": pl.Int64,
                    "attempt": pl.Int32,
                    "rank": pl.Int32,
                    "value": pl.Float64,
                    "line": pl.Int64,
                    "source": pl.String,
                    "time": schema.TIME,
                }
            )
        else:
            rows = (
                self.metrics.lazy()  # lazily: the filter copies only the columns kept, not the whole table
                .filter((pl.col("name") == name) & (pl.col("source") == source) & pl.col("record").is_not_null())
                .select("step", "attempt", "rank", "value", "line", "time", "record")
                .collect()
            )
            if not per_rank and rows.get_column("rank").null_count() > 0:
                rows = rows_where(rows, pl.col("rank").is_null())
            # (a filter keeping every row, or a sort of rows already in order, would copy every column)
            rows = in_order(rows, "attempt", "record")
            # one source by construction, and a rank or time column that is all null, are held as constants (a
            # polars scalar column: no buffer per row), not as 16 or 8 bytes a row for the whole run
            constant = [pl.lit(source, pl.String).alias("source")]
            constant += [
                pl.lit(None, rows.schema[c]).alias(c)
                for c in ("rank", "time")
                if rows.get_column(c).null_count() == rows.height
            ]
            attempt = rows.get_column("attempt")
            if rows.height and attempt.null_count() == 0 and attempt.min() == attempt.max():  # one attempt
                constant.append(pl.lit(attempt[0], pl.Int32).alias("attempt"))
            # `t`: each record's position among its rank's records; with one rank (or none) and the records in
            # increasing order, that is the row number (no dense rank: a sort of every record)
            t = pl.col("record").rank("dense").cast(pl.Int64).sub(1).over("rank")
            if one_group(rows, "rank") and ordered(rows, "record"):
                t = pl.int_range(pl.len(), dtype=pl.Int64)
            if name_asked == "loss" and self.loss_is_perplexity():
                # the per-token loss of a perplexity (<= 0 is no perplexity: null, as a value not read)
                rows = rows.with_columns(pl.when(pl.col("value") > 0).then(pl.col("value").log()).alias("value"))
            out = (
                rows.with_columns(t.alias("t"))
                .with_columns(constant)
                .select("t", "step", "attempt", "rank", "value", "line", "source", "time")
            )
            out = self._shared_columns(out)
            nulls = out.get_column("rank").null_count()
            if nulls in (0, out.height):  # the global and the per-rank view are the same rows: kept once
                self._cache[("series", name_asked, not per_rank)] = out
        self._cache[key] = out
        return out

    def _shared_columns(self, out: pl.DataFrame) -> pl.DataFrame:
        """`out` with its `t`, `step`, `line` and `time` columns replaced by an equal column of a series built
        before, when there is one: the metrics of one record (loss, grad norm, lr, loss scale of a JSONL line)
        have the same positions, steps, lines and clock, so the cached series share those buffers (polars
        columns are reference-counted) instead of holding one copy each (32 bytes a row per series)."""
        pool = self._cache.setdefault(("shared-columns",), {})
        same = []
        for c in ("t", "step", "line", "time"):
            col = out.get_column(c)
            if col.len() == 0 or col.null_count() == col.len():  # empty, or all null (a constant already)
                continue
            kept = pool.setdefault(c, [])
            prev = next((p for p in kept if p.len() == col.len() and p.dtype == col.dtype and p.equals(col)), None)
            if prev is None:
                kept.append(col)
            else:
                same.append(prev.alias(c))
        return out.with_columns(same) if same else out

    def grad_norm_series(self) -> tuple[pl.DataFrame, bool]:
        """Global grad norm per step: the logged one, else derived from the per-layer dump.

        Returns (series frame like `series()`, derived: bool). The derived norm is the L2
        over layers of each (step, rank) in the layer dump.
        """
        logged = self.series("grad_norm")
        if logged.height > 0:
            return logged, False
        if self.layers.height == 0:
            return logged, False
        derived = self.layer_l2_norms()
        ranks = derived.get_column("rank").drop_nulls().unique()
        if ranks.len() > 1:
            # global norm after all-reduce is not the sum over ranks: keep per rank, and
            # expose the mean over ranks as the global view
            derived = (
                derived.group_by("step", maintain_order=True)
                .agg(pl.col("value").mean(), pl.col("line").min(), pl.col("source").first())
                .with_columns(pl.lit(None, dtype=pl.Int32).alias("rank"))
            )
        derived = derived.with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).alias("t"),
            pl.lit(0, dtype=pl.Int32).alias("attempt"),
            pl.lit(None, dtype=schema.TIME).alias("time"),
        ).select("t", "step", "attempt", "rank", "value", "line", "source", "time")
        return derived, True

    def layer_l2_norms(self) -> pl.DataFrame:
        """Grad norm per (step, rank) derived from the per-layer dump: the L2 over layers.

        Columns `step`, `rank`, `value`, `line` (first dump line of the step), `source`;
        sorted by step then rank. Empty when no layers were ingested.
        """
        key = ("layer_l2",)
        if key not in self._cache:
            self._cache[key] = (
                self.layers.group_by("step", "rank", maintain_order=True)
                .agg(
                    (pl.col("grad_norm") ** 2).sum().sqrt().alias("value"),
                    pl.col("line").min(),
                    pl.col("source").first(),
                )
                .sort("step", "rank", nulls_last=True)
            )
        return self._cache[key]

    def manifest(self, tracing=None) -> tuple[pl.DataFrame, bool]:
        """Batch-manifest rows that have a step and a sample ID, in file order, and whether the steps
        ever go back (a replay after a resume, or per-rank files one after the other): only then can a
        (step, sample) appear twice, so only then do readers need to de-duplicate.

        Steps are in the log's numbering: when per-sample losses show the manifest counting one or two
        steps off the log (`alignment.manifest_offset`), its steps are shifted, and
        `manifest_alignment()` says so. `tracing`: `params.TracingParams` (its `align_*` fields)."""
        rows, replayed, _ = self._manifest_view(tracing)
        return rows, replayed

    def manifest_alignment(self, tracing=None):
        """The `alignment.Alignment` checked by `manifest()` (None: nothing could be checked)."""
        return self._manifest_view(tracing)[2]

    def _manifest_view(self, tracing):
        from spikeforensics.alignment import manifest_offset
        from spikeforensics.params import TracingParams

        tp = tracing or TracingParams()
        settings = (tp.align_max_offset, tp.align_min_corr, tp.align_min_gain, tp.align_window)
        key = ("manifest", settings)
        if key not in self._cache:
            rows = self.batches.filter(pl.col("step").is_not_null() & pl.col("sample_id").is_not_null())
            found = None
            if tp.align_max_offset and rows.height and rows.get_column("sample_loss").null_count() < rows.height:
                found = manifest_offset(rows, self.series("loss"), *settings)
                if found is not None and found.offset:
                    rows = rows.with_columns(pl.col("step") + found.offset)
            self._cache[key] = rows, bool(rows.height and (rows.get_column("step").diff() < 0).any()), found
        return self._cache[key]

    # -- other views -------------------------------------------------------------
    def ranks(self) -> list[int]:
        found = set(
            self.metrics.lazy().select(pl.col("rank").drop_nulls().unique()).collect().get_column("rank").to_list()
        )
        found |= set(self.layers.get_column("rank").drop_nulls().unique().to_list())
        return sorted(found)

    def layer_names(self) -> list[str]:
        return self.layers.get_column("layer").unique(maintain_order=True).to_list()

    def events_of(self, *kinds: str) -> pl.DataFrame:
        return self.events.filter(pl.col("kind").is_in(list(kinds)))

    def step_range(self) -> tuple[int | None, int | None, int]:
        """(first, last, distinct steps) of the step records, else of the layer dump; computed once (every
        incident asks), by a query that takes out no step column (a long run's has a row per metric)."""
        key = ("step_range",)
        if key not in self._cache:
            step = pl.col("step").drop_nulls()
            first, last, count = (
                self.metrics.lazy()
                .filter(pl.col("record").is_not_null())
                .select(step.min(), step.max().alias("last"), step.n_unique().alias("n"))
                .collect()
                .row(0)
            )
            if not count:
                steps = self.layers.get_column("step").drop_nulls()
                first, last, count = (steps.min(), steps.max(), steps.n_unique()) if steps.len() else (None, None, 0)
            self._cache[key] = (None, None, 0) if not count else (int(first), int(last), int(count))
        return self._cache[key]
