"""Fallback for custom training loops: a step counter followed by key/value pairs,
whatever the separators:

    step 6/1500 | loss 2.31 | lr 3e-4 | grad_norm 0.64
    step=6, loss=2.31, lr=0.0003
    Step 6: loss 2.31 grad norm 0.64
    [Epoch 1, step 6] loss: 2.31, lr: 3e-4
    Step 12 | Loss: 2.31 | LR: 3e-4 | GradNorm: 0.64          # GradNorm -> grad_norm, LR -> lr
    Epoch 3 Step 120 loss 2.3                                # epoch kept as a metric
    E5 iter[ 14/ 15] | [Loss] 51566519.44 | ... | [step]    89   # a `step` counter wins over `iter`
    epoch: 0, iter: 2, lr: 0.000001, 'loss': nan, 'acc': 0.0      # quoted keys (PaddleOCR 2.x)
    2018-04-26 00:50:15  Training   1/500  Loss  6.347            # `Training N/M` (Turi Create)
    BMN training loss(epoch 0): tem_loss: 1.184, pem class_loss: 0.458, total_loss: 1.883   # no counter at all
    [10] epoch 0, 10/186, g_loss nan d_fake_loss nan flat nan   # a bracketed counter at the line start
    000 epoch, 02000 iter, average time 0.6359, loss -403.4386   # the count before its word
    [Epoch 0/30, Batch 323/1313] [Losses: x nan, y nan, conf 0.755, cls nan, total nan]   # `total` is the loss
    Epoch 143/1000 | Loss 2214.4102 | Epsilon 0.00 | Win count 65   # once per epoch: the epoch is the step

An `Epoch N/M` is the counter only in a file whose loss lines have no other (qlearning4k's `train`
prints one line per epoch); beside a step, iteration or batch counter such a line is an epoch summary.
The convmesh shape (`train.py`: `print(f'[{total_it}] epoch {epoch}, {i}/{n}, g_loss ...')`)
has no counter word: a `[N]` that opens the line, followed by a word, is the step. The launcher
prefix stripper (`base.PREFIX_RE`) takes a `[NN] ` of two or more digits for a log viewer's line
number and removes it, so for such lines the counter is read back from the raw file (only when
this grammar reads the whole file and has loss lines without a counter word).

A line is a record when it has a step counter (`step`, `iter`, `iteration`,
`global_step`, `it`, `ite`) and a key containing `loss` with a number. Keys may be two words
(`train loss`, `grad norm`); names go through the alias table (`train loss` -> `loss`,
`val loss` -> `eval_loss`). A line whose only loss is an eval loss is an eval record.
Steps are stored as printed (taken as done steps; mode "done").

More custom-loop shapes (each from a real script's print):

    train_batch_loss[ 6510 ]:  1.5743603706359863            # a loss name indexed by the step
    valid_evaluation: loss=1.832921710359357, acc=0.759      # eval record, no counter
    Epoch 0/1 | Batch 100/15582 | Train Loss nan | Learning Rate 2e-08   # counter word `Batch`
    2022-12-08 17:57:31,371-INFO: Total iter: 10, epoch: 0, batch: 10, loss: [nan]   # [value]
    Epoch 0, Step 25, total used time 7.17 (s), avg loss so far is 0.1097   # `key is value`
    Epoch 0, val loss is 0.0477, val mse is 0.0242.            # eval record, no counter

- `name[ N ]: value` (GitYCC/crnn-pytorch `src/train.py`: `print('train_batch_loss[', i, ']: ',
  loss / train_size)`; forks print the f-string `train_batch_loss[{i}]: {x}`): a name holding `loss`
  indexed by an integer and followed by a colon; the index is the step (`i`, the global batch
  counter), the name goes through the alias table (`train_batch_loss` -> `loss`).
- `Batch i/n` / `batch: i` is the lowest counter (a `step`/`iter` on the line wins: PaddleSlim
  `paddleslim/auto_compression/compressor.py` logs `Total iter: {}, epoch: {}, batch: {}, loss: {}`
  and its step is `Total iter`). With its total `n` and an epoch on the line (`Epoch E/N`,
  `epoch: E`), step = (E - e0) * n + i (as `metriclogger`/`mmengine` do), e0 = 0 when the file prints
  an epoch 0, else 1; without a total, i as printed. `Train Loss` -> `loss`, `Learning Rate` -> `lr`.
  (The `Epoch 0/1 | Batch 0/15582 | Train Loss nan | Learning Rate 0.0` of Fengshenbang-LM #222 is
  the reporter's own Lightning callback print: neither Lightning nor the Fengshenbang-LM tree prints
  it, so it is read as this shape.)
- a value printed as a one-element array (`[10.000229]`, `[nan]`, `[1.e-05]`: the numpy array a
  Paddle static-graph fetch returns, printed by `format`) is that number; a longer list gives its
  first element (`lr=[5e-05, 5e-05]`, one per parameter group).
- `key is value` phrases (IcarusWizard/prednet-paddle `kitti_train.py`: `print(f'Epoch {e}, Step
  {step}, total used time {...} (s), avg loss so far is {np.mean(losses)}')`): up to four words
  before `is` after a separator; a leading `avg`/`average`/`mean`/`running` and a trailing `so far`
  are dropped (`avg loss so far` -> `loss`: the running mean is what the loop prints as its loss).
  That script's `Step` restarts every epoch and the log never prints the epoch length (the loop
  runs `samples_per_epoch // batch_size` steps, an argument): the step is stored as printed, the
  epoch kept as a metric, and each epoch is a new `attempt` of the counter.
- a line without a counter that names an evaluation before its first loss (`valid_evaluation:
  loss=...`, `Epoch 0, val loss is ...`) and carries a loss value is an eval record with the step
  of the train record before it (null before the first one); such a line never counts as unparsed.

Its sniffer is deliberately unsure (at most 0.35) so that every specific parser wins.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._generic_phases import eval_section, rewrite_lines, rewritten_sample, validation_bars
from spikeforensics.ingest._generic_records import hidden_nans, one_metric_lines
from spikeforensics.ingest._lines import GLOG_PREFIX
from spikeforensics.ingest.base import (
    ANSI_RE,
    MAX_STEP,
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    find_pairs,
    lines_from_bytes,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "generic_steps"
# the counter may be rounded with a K/M suffix (LeRobot `step:1K`, `step:12K`): see `_step`
COUNT = r"(\d+(?:\.\d+)?[KM]?|\d+)"
STEP = rf"(?i)\b(?:global[_ ]step|steps?|iteration|iter|ite|it)\b\]?\s*[:=#]?\s*\[?\s*(?-i:{COUNT})\s*(?:/\s*\d+)?"
# the same counter with its total captured (`iter 12/47`: group 1 the counter, group 2 the total)
STEP_TOTAL = r"(?i)\b(?:global[_ ]step|step|iteration|iter|ite|it)\b\]?\s*[:=#]?\s*\[?\s*(\d+)\s*/\s*(\d+)"
# a `step` counter wins over an `iter` one printed before it (`E5 iter[ 14/ 15] | ... | [step]    89`)
STEP_FIRST = rf"(?i)\b(?:global[_ ]step|steps?)\b\]?\s*[:=#]?\s*\[?\s*(?-i:{COUNT})\s*(?:/\s*\d+)?"
KEY = r"[A-Za-z_][\w./-]*"
# (`= nan.` ends a sentence; a closing backtick ends a paste fenced in Markdown code quotes; `>` and `}` close
# a record printed in angle brackets or braces: AcademiCodec's `<epoch:8, iter:7560, ..., loss_d:0.5080>`; a name
# starts at a word boundary: the unit glued to a number is no name's first word, HugeCTR's `Time(100 iters):
# 0.583091s Loss: 0.1322` prints `Loss`, not `s Loss`)
PAIR = rf"\b(?P<k>{KEY}(?: {KEY})?)(?:\s*[:=]\s*|\s+)(?P<v>{NUM_TOKEN})(?:[\s,;|)\]`>}}]|\.?$)"
# the count before its word (`000 epoch, 00000 iter, average time 7.09, loss 37.2`, `0 completed epochs,
# 100 batches Average training batch loss: nan`): the lowest-priority counter
NUM_COUNTER = r"(?i)(?:^|[\s,;|\[(])(\d+)\s+(?:iters?|iterations?|steps?|batches)\b"
TQDM_BAR = r"^.*?\d+%\|[^|]*\|\s*\d+/\d+\s*\[[^\]]*\]"
# the bar alone, when the text before it is the bar's description holding the loss (`Train Epoch: 1 Loss: 5.872
# Acc@1 3.611: 100%|###| 10010/10010 [3:06:24<00:00, 1.12s/it]`)
BAR_ONLY = r"\d+%\|[^|]*\|\s*\d+/\d+\s*\[[^\]]*\]"
LOCATION = r"\((?:[\w.-]+\.py|[A-Za-z_][\w.]*):\d+\)|\[[\w.-]+\.py:\d+\]"
# icefall / k2 recipes: `loss[loss=8.105, simple_loss=8.85, ..., over 18272.00 frames. ...], tot_loss[loss=...]`: a loss
# name opening its own bracketed dict whose first key is `loss` is that loss (`tot_loss` the running average)
OWN_LOSS_DICT = r"\b(\w*loss)\[loss="
LOSSES_TOTAL = r"(?i)(\blosses:[^\]]*?)\btotal\b"
# `Training   1/500  Loss  6.347` (Turi Create's `object_detector.create` progress): a `Training N/M`
# fraction is a counter too (only with its total: `Training loss 2.3` is a name)
TRAIN_FRAC = r"(?i)\btraining\s+(\d+)\s*/\s*\d+"
LOSSY = r"(?i)loss|\b(?:r?mse)\b|\bcost\s*[:=]"
COUNTER_KEYS = r"(?i)^(?:global[_ ]step|steps?|iteration|iter|ite|it)$"
# a bracketed counter opening the line (`[10] epoch 0, 10/186, g_loss nan ...`); RAW_BRACKET on the
# raw line, where a paste's `> ` may still stand before it
BRACKET = r"^\s*\[(\d+)\]\s+[A-Za-z]"
RAW_BRACKET = r"^(?:(?:\+?> ?)+)?\s*\[(\d+)\]\s+[A-Za-z]"
# carpedm20/DCGAN-tensorflow's `"[%8d Epoch:[%2d/%2d] [%4d/%4d] time: %4.4f, d_loss: %.8f, g_loss: %.8f"`: the
# global counter in a bracket left open, before the epoch and the batch i/n
OPEN_COUNTER = r"^\[\s*(\d+)\s+(?i:epoch)\b"
# `[N/M]` opening the line (a per-iteration print of deep-text-recognition-benchmark's loop: `[38/300000] lr: 0.1
# 0.1 single_train_elapsed_time: 0.23 train_loss: nan`) and `epoch E[N]` (e2e-mlt `epoch 0[500], loss: 54.610`)
BRACKET_FRAC = r"^\s*\[\s*(\d+)\s*/\s*\d+\s*\]\s+[A-Za-z]"
EPOCH_BRACKET = r"(?i)\bepoch\s*\d+\s*\[\s*(\d+)\s*\]"
# karpathy/char-rnn (Torch7) `1/21150 (epoch 0.002), train_loss =    nan, grad/param norm =    nan, time/batch = 2.80s`
FRAC_EPOCH = r"^\s*(\d+)\s*/\s*\d+\s+\(epoch\s"
# a Chinese counter word (the 土堆 PyTorch course's `训练次数：100, Loss：1.98`: "training count"; "iteration count",
# "step count"), with a full-width colon (read as `:` everywhere in this grammar)
ZH_COUNTER = r"(?:训练次数|迭代次数|步数)\s*[:：]\s*(\d+)"
BRACKET_RECORD = RAW_BRACKET + r".*?(?i:loss)\w*\]?\s*[:=]?\s*[-+]?[\d.nN]"
# the raw file is read a second time for bracketed counters only up to this size (pastes and
# small custom-loop logs; a big log with such lines keeps them as unparsed rather than doubling memory)
RAW_REREAD_MAX_BYTES = 64 << 20
# (`[CV]`: WeNet / WeTTS name their validation pass cross-validation, `Epoch 0 [CV] progress 290/341 loss nan ...`)
EVAL_WORDS = r"(?i)\b(?:evaluation|evaluating|validation|validating|eval|valid|val|test|testing)\b|\[CV\]"
# the same words bounded by any non-letter (`valid_evaluation:`), for lines without a counter
EVAL_NAMED = r"(?i)(?:^|[^a-z])(?:evaluation|evaluating|validation|validating|eval|valid|val|test|testing)(?:[^a-z]|$)"
# `train_batch_loss[ 6510 ]:  1.57`: a loss name indexed by the step, then a colon
LOSS_INDEX = r"(?:^|\s)([A-Za-z_]\w*(?i:loss)\w*)\[\s*(\d+)\s*\]\s*:"
# the lowest counter word: `Batch 100/15582`, `batch: 10` (its total, when printed, in group 2)
# (MXNet's Speedometer with auto_reset=False prints the batch range its running means cover, `Batch [0-160]`:
# the counter is its end)
BATCH = r"(?i)\bbatch\b\]?\s*[:=#]?\s*\[?\s*(?:\d+-)?(\d+)(?:\s*/\s*(\d+))?"
EPOCH = r"(?i)\bepoch\b\]?\s*[:=#]?\s*\[?\s*(\d+)"
# a line that is only an epoch header (attention-is-all-you-need-pytorch's `[ Epoch 0 ]` above its `  - (Training)
# loss: 5.12, accuracy: 3.7 %` and `  - (Validation) loss: ...` lines): the counter of the loss line under it (see
# `_head_counters`; only when such heads are the file's shape)
EPOCH_HEADER = r"(?i)^\W*epoch\s*[:#]?\s*(\d+)(?:\s*/\s*\d+)?\W*$"
# `Epoch:[0/2](1000/293491) loss:6.268` (baby-llama2-chinese and the pretrain scripts copied from it): the
# parenthesised fraction after an epoch is the batch within it
EPOCH_PAREN = r"(?i)\bepoch\b\s*[:=]?\s*\[?\s*(\d+)\s*(?:/\s*\d+)?\s*\]?\s*\(\s*(\d+)\s*/\s*(\d+)\s*\)"
# the same fraction in square brackets straight after the epoch's number (a PaddlePaddle CSRA loop's
# `Epoch 1[1616/5011]: loss:0.20306, lr:0.00159`: the samples seen in the epoch, restarting each epoch)
EPOCH_NUM_BRACKET = r"(?i)\bepoch\s*(\d+)\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]"
# `Epoch 0/1` -> `Epoch 0` in the body, so the epoch pairs up as a metric
EPOCH_OF = r"(?i)\b(epoch\b\]?\s*[:=#]?\s*\[?\s*\d+)\s*/\s*\d+"
# the last counter: an epoch printed with its total (`Epoch 143/1000 | Loss 2214.41 | Epsilon 0.00`, a
# loop that logs once per epoch: qlearning4k's `train`), only in a file with no step, iteration or batch
# counter on any loss line
EPOCH_FRAC = r"(?i)\bepoch\b\]?\s*[:=#]?\s*\[?\s*(\d+)\s*/\s*\d+"
# `[1,  2000] loss: 2.194` (the PyTorch CIFAR-10 tutorial's `print(f'[{epoch + 1}, {i + 1:5d}] loss: ...')`, copied
# into countless loops; DeepRecommender's `[0,  1000] RMSE: nan`): the epoch, then the batch counter
EPOCH_BATCH = r"^\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]"
# a line that opens with its epoch, no total and no other counter (simple-nmt's verbose-2 summary
# `Epoch 1 - |param|=6.01e+02 |g_param|=3.32e+05 loss=4.9263e+00 ppl=137.87`): a loop printing once per epoch
# (after a logging timestamp and level, `2023-05-15 22:50:17,398 INFO:Epoch 1: Train Loss=0.0717, Val Loss=0.0766`)
EPOCH_LEAD = (
    r"(?i)^\W*(?:\d{2,4}[-/]\d{2}[-/]\d{2,4}[ T][\d:.,]+\W*(?:(?:info|debug|warn|warning|notice)\W*)?)?"
    r"epoch\s*[:=#]?\s*\d+(?:[^\d./]|$)"
)
# the loss named before its counter (`Loss at step 100 : 187.92`: nfmcclure/tensorflow_cookbook's
# `print('Loss at step {} : {}'.format(i+1, loss_val))`): the `at step N` between name and value is dropped
LOSS_AT = r"(?i)\b(\w*loss\w*)\s+(?:at|@)\s+(?:global[_ ]step|step|iteration|iter|it|batch|epoch)\b\s*[:=#]?\s*\d+"
# a bare fraction and one number, nothing else on the line (karpathy's makemore: `print(f'{i:7d}/{max_steps:7d}:
# {loss.item():.4f}')`, `      0/ 200000: 3.3167`): the counter and the loss, in a file of >= MIN_UNCOUNTED such lines
FRAC_VALUE = r"^\s*(\d+)\s*/\s*\d+\s*:\s*([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|(?i:nan|inf)))\s*$"
_BARE = r"([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|(?i:nan|inf)))"
# a count, a colon and two to four bare numbers (a GAN loop's `print('{}: {}\t{}'.format(step, loss_d, loss_g))`,
# `0: inf  nan`, `10: 1.38  0.69`): the count and unnamed values, the first stored as `loss` and the others as
# `column_2` ... (the log names none of them), in a file of >= MIN_UNCOUNTED such lines with rising counts
COUNT_VALUES = rf"^\s*(\d+)\s*:\s*{_BARE}\s+{_BARE}(?:\s+{_BARE})?(?:\s+{_BARE})?\s*$"
# an epoch fraction, then a bare batch fraction (MONAI research-contributions' SwinUNETR/UNETR trainers:
# `print("Epoch {}/{} {}/{}".format(epoch, max_epochs, idx, len(loader)), "loss: ...")`, `Epoch 31/300 200/1000
# loss: 0.2830 time 1.49s`): read as `Epoch 31/300 batch 200/1000` (see BATCH)
EPOCH_FRAC_BATCH = r"(?i)\b(epoch)\s*[:=]?\s*(\d+)\s*/\s*(\d+)\s*,?\s+(\d+)\s*/\s*(\d+)\b"
# an epoch's closing summary (the same trainers' `Final training  31/299 loss: 0.2942 time 1477.11s`): no record
FINAL_SUMMARY = r"(?i)\bfinal\s+(?:training|train)\b"
# an epoch or the training that says it is over (`Epoch 1 completed | train_loss=0.0787 | global_step=324`,
# P2I-GAN's epoch mean beside its `Epoch 1 | step 100/200000 | loss=0.0789` interval lines; `End of epoch 3: loss
# 0.41`; `Training complete! Final loss: 3.1890` after build_llm's `step 1500/2000 (75.0%): train loss 3.1962`):
# a summary, not a record, in a file with other counted loss lines (alone, such lines are a once-per-epoch loop's
# records)
CLOSING_SUMMARY = (
    r"(?i)\bepoch\b\s*[:=#]?\s*\d+(?:\s*/\s*\d+)?\s*(?:is\s+)?(?:completed?|finished|done|ended|summary)\b"
    r"|\bend\s+of\s+epoch\b|\btraining\s+(?:is\s+)?(?:completed?|finished|done)\b|\bfinal\s+(?:\w+\s+)?loss\b"
)
# a loss's setting, not its value (a config dump's `loss_weight: 1.0`, `koleo_loss_weight: 0.1`, `loss_type: 2`):
# no record
LOSS_SETTING = r"(?:_weights?|_coef|_coeff|_coefficient|_type|_factor|_ratio_cfg)$"
# a bare count opening the line before a word (`1328 Loss : 0.0562`: a loop's `print(epoch, "Loss :", loss)`)
LEAD_COUNT = r"^\s*(\d+)\s+[A-Za-z]"
# `|name|=value`: a norm in math notation (simple-nmt's `|param|` and `|g_param|`, the parameter and gradient norms)
NORM_BARS = r"\|([A-Za-z_]\w*)\|\s*="
# `loss_train, 0.833` (a loop that prints `f"{name}, {value}"`): a loss name, a comma, its number
KEY_COMMA = r"\b((?:[A-Za-z_]\w*)?(?i:loss)\w*),\s+([-+]?(?:\d|(?i:nan|inf)))"
# a loop whose objective is printed as RMSE / MSE, or as its cost, with no `loss` on the line (DeepRecommender's
# `[0,  1000] RMSE: nan`, rasbt's notebooks' `Epoch: 001/050 | Batch 050/891 | Cost: 1.2299`): that is the loss it
# trains on
RMSE_NAMES = ("rmse", "mse", "cost")
# `avg loss so far is 0.1097`, `val mse is 0.0242.`: up to four words before `is`, after a separator
# a glog prefix (`I0712 12:10:37.058244  3123 solver.cpp:228] `): its `file.cpp:228` is no key/value pair
GLOG_LINE_PREFIX = "^" + GLOG_PREFIX
# CLU's metric writer (`clu.metric_writers.LoggingWriter`, the JAX/Flax examples' `[2000] train_loss=3.729,
# train_accuracy=0.374`) behind absl's prefix: the bracketed counter after a glog prefix
GLOG_BRACKET = GLOG_LINE_PREFIX + r"\[(\d+)\]\s+[A-Za-z]"
# (also after a sentence's full stop: BigDL's `... Throughput is 2190.889 records/second. Loss is NaN. Current
# learning rate is 0.0011.`)
IS_PAIR = rf"(?:^|[,;|:(]\s*|\.\s+)(?P<k>[A-Za-z_][\w./-]*(?: [A-Za-z_][\w./-]*){{0,3}}) (?i:is) (?P<v>{NUM_TOKEN})"
IS_FILLER = r"(?i)^(?:avg|average|mean|running|smoothed|current) |\s+so far$"
# what follows a loss name on a record line (sniffer): `loss: 2.3`, `loss [nan]`, `loss so far is 0.1`
# a loss value, then a counter word with its number, later on the line (one count per line with
# the shapes above: a line that has both is counted twice, which only ever confirms a record)
LOSS_THEN_STEP = rf"(?i:(?:\b|_)loss)[\w/]*\]?\s*[:=]\s*\[?\s*[-+]?[\d.nN][^\n]*?{STEP}"
LOSS_TAIL = r".*?(?i:loss|\br?mse\b|\bcost\b)\w*(?:\s[A-Za-z]{1,2}\d?\s*:)?['\"]?\]?(?:\s*[:=,]?\s*\[?\s*['\"]?|[\w ]{0,20}?\s(?i:is)\s+)[-+]?[\d.nN]"
# a quoted key (`'loss': nan`, a dict's repr inside a PaddleOCR line) is its bare name
QUOTED_KEY = r"""['"]([A-Za-z_][\w./-]*)['"]\s*:"""
# a number printed as a string (PaddleDetection 2.x `'loss': '24.061707'`, a dict of formatted stats) is that number
QUOTED_NUMBER = r"""['"]([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[Nn]a[Nn]|-?[Ii]nf))['"]"""
# a scalar printed through its wrapper: `np.float64(0.40)`, `np.int32(2)`, `tensor(2.31, device='cuda:0')`
WRAPPED = r"(?:np\.|numpy\.)?(?:(?:float|int|uint|bfloat|half)\d*|tensor)\(\s*([-+]?[\w.+-]+)\s*(?:,[^()]*)?\)"
# a numpy array's repr, alone or in a list (a Paddle static-graph fetch printed as PaddleFleetX does: `loss_print:
# [array([10.948218], dtype=float32)]`): its first element
ARRAY_WRAPPED = r"\[?\s*(?:np\.|numpy\.)?array\(\s*\[\s*([-+]?[\w.+-]+)[^\]]*\]\s*(?:,[^()]*)?\)\s*\]?"
MAX_CONFIDENCE = 0.35
COUNT_VALUES_MIN = (
    10  # `N: v1 v2` lines that make a file of them (see `_rising_count_values`): a numbered list is shorter
)
COUNT_VALUES_RISING = 0.9  # ... whose counts rise on 90% of consecutive pairs (a resume goes back: a new attempt)
HEAD_REACH = 3  # a record's counter may stand up to 3 non-blank lines above its loss line (see `_head_counters`)
MIN_UNCOUNTED = 3  # loss lines of a file without any counter that make it a log of step-less records
# a loss line with a counter on it (a counter elsewhere, DeepSpeed's `global_step=10` timer lines beside
# RWKV's step-less `Epoch 0, Loss: 1.01` prints, does not make the loss lines counted)
COUNTED_LOSS = rf"(?i:loss).*{STEP}|{STEP}.*(?i:loss)"
UNCOUNTED_SHARE = (
    0.9  # ... when they are >= 90% of its loss lines (source or traceback lines quoting `loss` are the rest)
)
# (a colon, as a log prints it: `loss = 0.0` three times is more likely a script's source than a log; a name of
# two words opening the line before `=` is no Python: MOERec's per-epoch `train loss = 1.2836`; within a
# sentence, `The train loss = 0.91 at the start`, it is prose)
# (`loss = x` opening a line only as the first of `name = value` pairs: chemprop's `Loss = 1.1e+00, PNorm = 34.6,
# GNorm = 3.7, lr_0 = 1.3e-04`; a bare `loss = 0.5` is as likely a line of a printed script or config)
# (a loss named by a letter or two after it, the loop's own label: a hybrid ODE's `Loss X: 0.91, Loss Y: 0.87`, a
# GAN's `Loss D: 0.69`)
# (`loss is x, name is y, ...` opening a line: MERL-style CLIP pretraining's `loss is 15.14, acc1 is 0.98,
# cma_loss is 11.48, uma_loss is 3.67`, one per optimizer step; a sentence `the loss is 0.9` is prose)
UNCOUNTED_LOSS = (
    r"(?i)(?:(?:loss\w*(?:\s[a-z]{1,2}\d?)?\s*:|^\W*[a-z]+\s+loss\s*=)\s*\[?\s*[-+]?(?:\d|nan|inf)"
    r"|^\W*loss\w*\s*=\s*[-+]?(?:[\d.]+(?:e[-+]?\d+)?|nan|inf)\s*,\s*\w+\s*=\s*[-+]?(?:\d|nan|inf)"
    r"|^\W*loss\w*\s+is\s+[-+]?(?:[\d.]+(?:e[-+]?\d+)?|nan|inf)\s*,\s*\w+\s+is\s+[-+]?(?:\d|nan|inf))"
)
# a loss named as the training's (`train loss = x`, `Training loss: x`): in a file of step-less loss lines that
# names its training loss so, a loss line naming no phase is the other phase's (MOERec prints `loss: 1.4166,
# Performance is better... saving the model`, its validation, after each epoch's `train loss = 1.2836`)
TRAIN_NAMED_LOSS = r"(?i)\btrain(?:ing)?[ _]loss\b"
# ... the loss alone, no other word naming it (`loss: 1.4166, Performance is better...`; a `kl loss: 0.5` beside
# `train loss: 2.0` is another training term, not the other phase)
UNNAMED_LOSS = r"(?i)^\W*loss\s*[:=]\s*\[?\s*[-+]?(?:\d|nan|inf)"
# a loss line under a counter line (see `_head_counters`): `=` as well as `:`
UNCOUNTED_LOSS_ANY = r"(?i)loss\w*(?:\s[a-z]{1,2}\d?\s*:|\s*[:=])\s*\[?\s*[-+]?(?:\d|nan|inf)"
# the catch-all grammar: in a mixed log it is never offered a line the event catalogue read
CATCH_ALL = True


def _rising(epochs: pl.Series) -> bool:
    """Each line its own epoch, in rising order: a loop printing once per epoch (at least two such lines)."""
    return epochs.len() >= 2 and epochs.n_unique() == epochs.len() and bool((epochs.diff().drop_nulls() > 0).all())


def _ascii_punctuation(sample: SniffSample) -> SniffSample:
    """Full-width colon and comma (Chinese prints: `训练次数：100, Loss：1.98`) as ASCII, as `parse` reads them."""
    if "：" not in sample.text and "，" not in sample.text:
        return sample
    fix = str.maketrans({"：": ":", "，": ","})
    return SniffSample(sample.path, sample.text.translate(fix), [line.translate(fix) for line in sample.lines])


def sniff(sample: SniffSample) -> float:
    sample = rewritten_sample(_ascii_punctuation(sample))
    n = (
        sniff_share(
            sample,
            rf"(?:{STEP}|{BATCH}|{TRAIN_FRAC}|{OPEN_COUNTER}|{NUM_COUNTER}|{EPOCH_PAREN}|{EPOCH_NUM_BRACKET}|{EPOCH_FRAC}|{EPOCH_BATCH}|{BRACKET_FRAC}|"
            rf"{GLOG_BRACKET}|{EPOCH_BRACKET}|{FRAC_EPOCH}|{ZH_COUNTER}|{EPOCH_FRAC_BATCH}){LOSS_TAIL}",
        )
        + sniff_share(sample, LOSS_INDEX + r"\s*[-+]?[\d.nN]")
        + sniff_share(sample, rf"(?:{STEP}|{BATCH}).*(?i:\blosses):\s*[A-Za-z_]\w*\s+[-+]?[\d.nN]")
        # the loss printed before its counter (`loss = 2.31, step = 100`, a dict's keys sorted)
        + sniff_share(sample, LOSS_THEN_STEP)
        + sniff_share(sample, LOSS_AT + r"\s*[:=]\s*[-+]?[\d.nN]")
    )
    # (on the raw lines: the launcher-prefix stripper takes a `10: ` for an srun rank label, see `_count_prefixes`)
    raw = pl.Series(sample.text.splitlines()[: len(sample.lines)], dtype=pl.String)
    fractions = sniff_share(sample, FRAC_VALUE) + _rising_count_values(raw)
    if fractions >= MIN_UNCOUNTED:
        n += fractions
    # lines that open with their epoch: a loop printing once per epoch when there are several (one such line
    # in a file of step-less loss lines is an epoch's summary, NCRF++'s `Epoch: 0 training finished ... total loss`)
    # (as `_epoch_counter` reads them: each its own, rising epoch)
    lead = pl.Series(sample.lines, dtype=pl.String).str.extract(f"({EPOCH_LEAD}){LOSS_TAIL}", 1)
    epochs = lead.str.extract(EPOCH, 1).cast(pl.Int64, strict=False).drop_nulls()
    if _rising(epochs):
        n += epochs.len()
    if n < 2:  # the counter on one line, the loss on the next (see `_head_counters`)
        lines = pl.DataFrame({"text": sample.lines}, schema={"text": pl.String}).with_row_index("line")
        heads = _head_counters(lines, pl.col("text").str.extract(STEP, 1))
        valued = lines.filter(pl.col("text").str.contains(UNCOUNTED_LOSS_ANY)).select(pl.col("line").cast(pl.Int64))
        n += valued.join(heads.with_columns(pl.col("line").cast(pl.Int64)), on="line").height
    if n < 2:  # bracketed counters, on the raw lines (the prefix stripper may have taken them)
        raw = sample.text.splitlines()[: len(sample.lines) + 1]
        n += int(pl.Series(raw, dtype=pl.String).str.contains(BRACKET_RECORD).sum()) if raw else 0
    # one record line is enough in a paste of a few lines (`... iter: 5100  loss: nan (nan) ...`)
    if n >= 2 or (n == 1 and len(sample.lines) <= 5):
        return MAX_CONFIDENCE
    if n == 0 and sniff_share(sample, UNCOUNTED_LOSS) >= MIN_UNCOUNTED and not sniff_share(sample, COUNTED_LOSS):
        return MAX_CONFIDENCE  # loss lines and no counter on any: step-less records (see `parse`)
    return 0.2 if n else 0.0


def _rising_count_values(texts: pl.Series) -> int:
    """The number of COUNT_VALUES lines when they are the file's shape, else 0: at least COUNT_VALUES_MIN of them,
    at least half of its non-blank lines, their counts rising on at least COUNT_VALUES_RISING of consecutive
    pairs (a resumed loop goes back once or twice). A per-class table (`0: 0.512 0.733` under `Per-class AP`) or
    a short numbered list inside a log is no loop."""
    solid = texts.filter(texts.str.strip_chars() != "")
    counts = solid.str.extract(COUNT_VALUES, 1).drop_nulls().cast(pl.Int64, strict=False).drop_nulls()
    if counts.len() < COUNT_VALUES_MIN or counts.len() < 0.5 * solid.len():
        return 0
    rises = counts.diff().drop_nulls()
    return counts.len() if float((rises > 0).mean()) >= COUNT_VALUES_RISING else 0


def _count_prefixes(lines: pl.DataFrame) -> pl.DataFrame:
    """COUNT_VALUES lines as printed: `prepared_lines` strips `0: `, `10: `, `20: ` as srun's `--label` rank
    prefix; when the lines left are bare numbers and those "ranks" rise strictly through the file, they are a
    loop's counts (an srun label repeats its few ranks), so the count goes back in front of its values."""
    bare = pl.col("text").str.contains(rf"^\s*{_BARE}(?:\s+{_BARE}){{1,3}}\s*$") & pl.col("prefix_rank").is_not_null()
    restored = pl.when(bare).then(pl.format("{}: {}", pl.col("prefix_rank"), pl.col("text"))).otherwise(pl.col("text"))
    if not lines.select(bare.any()).item() or _rising_count_values(lines.select(restored).to_series()) == 0:
        return lines
    return lines.with_columns(
        restored.alias("text"), pl.when(bare).then(None).otherwise(pl.col("prefix_rank")).alias("prefix_rank")
    )


def _step(token: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(step, step_approx) from a counter token. A rounded counter (`1K`, `1.2M`) gives its
    value (1000) and is approximate: consecutive records that print the same rounded step
    are separate records, not one record printed twice (see `base.number_records`)."""
    mult = pl.when(token.str.ends_with("K")).then(1e3).when(token.str.ends_with("M")).then(1e6).otherwise(1.0)
    value = token.str.strip_chars_end("KM").cast(pl.Float64, strict=False) * mult
    # a float is exact only up to MAX_STEP: a counter past it is out of range
    value = pl.when(value <= MAX_STEP).then(value.round(0)).otherwise(pl.lit(float("inf")))
    return step_int(pl.when(token.is_not_null()).then(value)).alias("step"), token.str.contains("[KM]$").alias(
        "step_approx"
    )


def _raw_bracket(src: SourceFile, wanted: pl.Series) -> pl.Expr:
    """`_raw_bracket`: the `[N]` counter opening the raw line, for the lines in `wanted` (loss lines
    without a counter word) whose counter the prefix stripper removed. The raw file is read again
    (not through `read_bytes`: the driver's hash sees the file once) only when there are such lines."""
    none = pl.lit(None, dtype=pl.String).alias("_raw_bracket")
    if wanted.len() == 0 or src.only_lines is not None or src.path.stat().st_size > RAW_REREAD_MAX_BYTES:
        return none
    try:
        raw = lines_from_bytes(src.path.read_bytes())
    except OSError:
        return none
    found = (
        raw.filter(pl.col("line").is_in(wanted.implode()))
        .select("line", pl.col("text").str.replace_all(ANSI_RE, "").str.extract(RAW_BRACKET, 1).alias("_b"))
        .drop_nulls()
    )
    if found.height == 0:
        return none
    mapping = dict(zip(found.get_column("line").to_list(), found.get_column("_b").to_list()))
    return pl.col("line").replace_strict(mapping, default=None, return_dtype=pl.String).alias("_raw_bracket")


def _head_counters(lines: pl.DataFrame, token: pl.Expr) -> pl.DataFrame:
    """(line, _head): a record printed over two lines, the counter on the first and the loss on the next
    (torchcv: `Train Epoch: 2<TAB>Train Iteration: 3300<TAB>Time 91.554s / 100iters` then `Learning rate =
    [0.001, 0.01]<TAB>Loss = 213.2 (ave = 149.9)`), or a few lines below it (a TensorFlow loop's block
    `iteration=1`, `<TAB> nan in per_replica_images from dataset :  {0: False, 1: False}`, `<TAB> averaged_loss =
    nan`): for each line, the counter token of the nearest non-blank line at most HEAD_REACH lines before it that
    names no loss, with no loss value printed in between (a line's own counter, where it has one, wins)."""
    text = pl.col("text")
    solid = lines.filter(text.str.strip_chars() != "").select(
        "line",
        pl.when(~text.str.contains(LOSSY)).then(token).alias("_tok"),
        text.str.contains(UNCOUNTED_LOSS_ANY).alias("_valued"),
    )
    # a loss value closes its block: the next loss line needs a counter of its own
    solid = solid.with_columns(pl.col("_valued").shift(1).fill_null(False).cum_sum().alias("_block"))
    filled = solid.with_columns(pl.col("_tok").forward_fill(limit=HEAD_REACH - 1).over("_block").alias("_fill"))
    return filled.select("line", pl.col("_fill").shift(1).over("_block").alias("_head")).filter(
        pl.col("_head").is_not_null()
    )


def _epoch_composed(epoch: pl.Expr, n: pl.Expr, i: pl.Expr, e0: float) -> pl.Expr:
    """(E - e0) * n + i of an in-epoch counter i of n, rounded; a value past MAX_STEP is out of range."""
    value = (epoch - e0) * n + i
    return pl.when(value <= MAX_STEP).then(value.round(0)).otherwise(pl.lit(float("inf")))


def _batch_step(frame: pl.DataFrame) -> pl.Expr:
    """The step of a `Batch i/n` counter, or of the `(i/n)` after an epoch (`Epoch:[0/2](1000/293491)`):
    (E - e0) * n + i with an epoch E on the line (e0 = 0 when the file prints an epoch 0 there, else 1),
    else i as printed."""
    text = pl.col("text")
    fracs = (BATCH, EPOCH_PAREN, EPOCH_NUM_BRACKET)
    i = pl.coalesce([text.str.extract(f, 1 if f == BATCH else 2) for f in fracs]).cast(pl.Float64, strict=False)
    n = pl.coalesce([text.str.extract(f, 2 if f == BATCH else 3) for f in fracs]).cast(pl.Float64, strict=False)
    epoch = text.str.extract(EPOCH, 1).cast(pl.Float64, strict=False)
    composed = n.is_not_null() & epoch.is_not_null()
    e0 = 0.0 if frame.select((composed & (epoch == 0)).any()).item() else 1.0
    value = pl.when(composed).then(_epoch_composed(epoch, n, i, e0)).otherwise(i)
    value = pl.when(value <= MAX_STEP).then(value.round(0)).otherwise(pl.lit(float("inf")))
    return step_int(pl.when(pl.any_horizontal([text.str.contains(f) for f in fracs])).then(value))


def _epoch_counter(frame: pl.DataFrame) -> pl.DataFrame:
    """The last counter, in a file whose loss lines have no other and no `Epoch N/M`: an `Epoch N` without
    its total (a tqdm bar's description left at the end of each epoch, `Train Epoch: 1 Loss: 5.872 Acc@1 3.6:
    100%|###| 10010/10010 [...]`), only when each such line has its own epoch, rising through the file (a
    loop printing one line per epoch). Many loss lines under one epoch (RWKV's `Epoch 0, Loss: 1.01` per
    batch) are step-less records instead, as before."""
    if frame.get_column("step").null_count() != frame.height:
        return frame
    epoch = frame.get_column("text").str.extract(EPOCH, 1).cast(pl.Int64, strict=False).drop_nulls()
    if not _rising(epoch):
        return frame
    return frame.with_columns(_step(pl.col("text").str.extract(EPOCH, 1))[0].alias("step"))


def _lead_counter(frame: pl.DataFrame) -> pl.DataFrame:
    """In a file whose loss lines have no counter word, a bare count opening every one of them (audio-diffusion
    -pytorch#35's loop, `print(epoch, "Loss :", loss)`: `1328 Loss : 0.0562`) is the step, when each line has its
    own count, rising through the file; a count on some lines only, or repeating, is no counter."""
    if frame.get_column("step").null_count() != frame.height:
        return frame
    lead = frame.get_column("text").str.extract(LEAD_COUNT, 1)
    if lead.null_count() or not _rising(lead.cast(pl.Int64, strict=False).drop_nulls()):
        return frame
    return frame.with_columns(_step(pl.col("text").str.extract(LEAD_COUNT, 1))[0].alias("step"))


def _per_epoch_counter(frame: pl.DataFrame) -> pl.DataFrame:
    """A `step`/`iter` counter printed with its total beside an epoch that restarts every epoch (Flair's
    `epoch 3 - iter 12/47 - loss 2.1`): step = (E - e0) * n + i, as for a `Batch i/n` counter (e0 = 0 when an
    epoch 0 is printed, else 1). Decided per file: only when the counter goes back as the epoch moves up and
    stays within its total (NVIDIA's MLPerf RNN-T `epoch 42 | iter 136/136 | loss 27.3`: 1-based, it reaches it); a
    global counter printed with the run's total (`Epoch 3 Step 1200/50000`) is kept."""
    text = pl.col("text")
    # the epoch on the line, else the `Epoch 3/10` header line above it (PaddlePaddle hapi's `Model.fit`: `Epoch
    # 1/10`, then `step  10/614 - loss: 0.16 - ...`); not an evaluation section's lines, whose own counter restarts
    # inside the epoch (hapi's `Eval begin...`, then `step 10/88 - loss: ...`)
    g = frame.with_columns(
        text.str.extract(STEP_TOTAL, 2).cast(pl.Float64, strict=False).alias("_n"),
        pl.coalesce(text.str.extract(EPOCH, 1).cast(pl.Float64, strict=False), pl.col("_epoch_head")).alias("_e"),
    )
    composed = pl.col("_n").is_not_null() & pl.col("_e").is_not_null() & pl.col("step").is_not_null()
    composed = composed & ~pl.col("_in_eval")
    seq = g.filter(composed).sort("line")
    inside = seq.filter(pl.col("step") > pl.col("_n")).height == 0  # a 1-based counter reaches its total
    if seq.height < 2 or not inside or not _restarts_with_epoch(seq, "step"):
        return frame
    # the largest printed total: a total that varies by one inside the epochs (GluonCV's `iteration 0187/0188`
    # beside `0001/0187`) must not number two records alike
    return _compose_epochs(g, seq, seq.get_column("_n").max(), "step", composed).drop("_n", "_e")


def _epoch_batch_counter(frame: pl.DataFrame) -> pl.DataFrame:
    """A `Batch i` counter printed without its total beside an epoch, restarting every epoch (a hybrid ODE loop's
    `Epoch 3, Batch 17, Loss X: 0.91`): step = (E - e0) * n + i with n the number of batches the epochs print (the
    largest counter, + 1 for a 0-based one), as `_per_epoch_counter` composes a counter with its total. Decided per
    file: only when every time the counter goes back the epoch moves up (else each restart is a new attempt)."""
    text = pl.col("text")
    g = frame.with_columns(
        text.str.extract(BATCH, 1).cast(pl.Float64, strict=False).alias("_i"),
        text.str.extract(BATCH, 2).alias("_n"),
        text.str.extract(EPOCH, 1).cast(pl.Float64, strict=False).alias("_e"),
    )
    # (the rows whose step is that batch counter: no step or iteration counter of their own)
    composed = pl.col("_i").is_not_null() & pl.col("_n").is_null() & pl.col("_e").is_not_null()
    composed = composed & (pl.col("step") == pl.col("_i"))
    seq = g.filter(composed).sort("line")
    if seq.height < 2 or not _restarts_with_epoch(seq, "_i"):
        return frame
    n = seq.get_column("_i").max() + (1.0 if seq.get_column("_i").min() == 0 else 0.0)
    return _compose_epochs(g, seq, n, "_i", composed).drop("_i", "_n", "_e")


def _restarts_with_epoch(seq: pl.DataFrame, counter: str) -> bool:
    """Whether the in-epoch `counter` of `seq` (rows in file order, the epoch in `_e`) goes back at least once, and
    only where the epoch moves up."""
    back = pl.col(counter).diff() < 0
    restarts = seq.filter(back & (pl.col("_e").diff() > 0)).height
    return restarts > 0 and seq.filter(back).height == restarts


def _compose_epochs(g: pl.DataFrame, seq: pl.DataFrame, n: float, counter: str, composed: pl.Expr) -> pl.DataFrame:
    """`g` with the step of its `composed` rows as (E - e0) * n + `counter` (E in `_e`; e0 = 0 when `seq` prints an
    epoch 0, else 1)."""
    e0 = 0.0 if seq.select((pl.col("_e") == 0).any()).item() else 1.0
    value = _epoch_composed(pl.col("_e"), pl.lit(n), pl.col(counter).cast(pl.Float64), e0)
    return g.with_columns(pl.when(composed).then(step_int(value)).otherwise(pl.col("step")).alias("step"))


def _frozen_counter(frame: pl.DataFrame) -> pl.DataFrame:
    """A counter that never moves while the epoch on its lines does (a loop printing when `i % N == 0` in epochs
    shorter than N batches: COMPOSE's `Epoch 1, Iter 0: Loss:nan S-loss:nan` once per epoch): the epoch is the
    step, when every counted line has its own, rising epoch."""
    counted = frame.filter(pl.col("step").is_not_null())
    if counted.height < 2 or counted.get_column("step").n_unique() != 1:
        return frame
    epoch = counted.get_column("text").str.extract(EPOCH, 1).cast(pl.Int64, strict=False)
    if epoch.null_count() or not _rising(epoch):
        return frame
    by_epoch = _step(pl.col("text").str.extract(EPOCH, 1))[0]
    return frame.with_columns(
        pl.when(pl.col("step").is_not_null()).then(by_epoch).otherwise(pl.col("step")).alias("step")
    )


def _values(cand: pl.DataFrame, eval_rows: pl.Expr) -> pl.DataFrame:
    """(line, name, value) of the candidate lines: `key is value` phrases, then key/value pairs."""
    text = pl.col("text")
    described = text.str.extract(r"^(.*?)\d+%\|", 1).str.contains(LOSSY).fill_null(False)
    body = (
        pl.when(described)
        .then(text.str.replace(BAR_ONLY, " "))
        # a tqdm bar the record line was printed after (`[train]:  48%|####  | 95400/200000 [02:45<7:39:06, 3.80it/s]`)
        .otherwise(text.str.replace(TQDM_BAR, " "))
        .str.replace(GLOG_LINE_PREFIX, "")
        # and a logger's `(module:lineno)` location are no key/value pairs
        .str.replace_all(LOCATION, " ")
        .str.replace_all(OWN_LOSS_DICT, "${1}=")
        # numpy / torch scalars as Python prints them (verl's `actor/grad_norm:np.float64(0.40)`)
        .str.replace_all(ARRAY_WRAPPED, "$1")
        .str.replace_all(WRAPPED, "$1")
        .str.replace_all(QUOTED_KEY, "${1}:")
        .str.replace_all(QUOTED_NUMBER, "${1}")
        .str.replace(LOSS_AT, "${1}")
        .str.replace(FRAC_VALUE, "loss: ${2}")
        .str.replace(COUNT_VALUES, "loss: ${2} column_2: ${3} column_3: ${4} column_4: ${5}")
        .str.replace(STEP, " ")
        .str.replace(TRAIN_FRAC, " ")
        .str.replace(NUM_COUNTER, " ")
        # a `[Losses: x 0.1, y 0.2, ..., total 1.3]` list (eriklindernoren/PyTorch-YOLOv3): its `total` is the loss
        .str.replace(LOSSES_TOTAL, "${1}total_loss")
        .str.replace(LOSS_INDEX, "${1}:")
        .str.replace(EPOCH_PAREN, "epoch ${1} ")
        .str.replace(EPOCH_NUM_BRACKET, "epoch ${1} ")
        .str.replace(EPOCH_OF, "${1}")
        .str.replace(EPOCH_BATCH, "epoch ${1} ")
        .str.replace_all(KEY_COMMA, "${1}: ${2}")
        .str.replace_all(NORM_BARS, "${1}_norm=")
    )
    framed = cand.select("line", "_eval", body.alias("text"))
    said = find_pairs(framed, IS_PAIR).with_columns(pl.col("k").str.replace_all(IS_FILLER, ""))
    # brackets around names or values (`[Loss] 2.3`, `lr=[5e-05]`, `loss: [nan]`) do not hide the pair
    rest = framed.with_columns(text.str.replace_all(IS_PAIR, ", ").str.replace_all(r"[\[\]]", " "))
    pairs = pl.concat([find_pairs(rest, PAIR), said], how="diagonal_relaxed")
    pairs = pairs.filter(~pl.col("k").str.contains(COUNTER_KEYS))
    values = named_values(pairs, eval_rows=eval_rows).select("line", "name", "value")
    # RMSE / MSE / cost printed as the objective of a line that names no loss is its loss
    lossless = values.group_by("line").agg(pl.col("name").str.contains("loss").any().alias("_l")).filter(~pl.col("_l"))
    is_rmse = pl.col("name").is_in(RMSE_NAMES) & pl.col("line").is_in(lossless.get_column("line").implode())
    return values.with_columns(pl.when(is_rmse).then(pl.lit("loss")).otherwise(pl.col("name")).alias("name"))


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    if lines.select(text.str.contains("[：，]").any()).item():  # full-width punctuation (see `_ascii_punctuation`)
        lines = lines.with_columns(
            text.str.replace_all("：", ":", literal=True).str.replace_all("，", ",", literal=True)
        )
    lines = eval_section(_count_prefixes(lines).with_columns(rewrite_lines(text).alias("text")))
    # the epoch of the last `Epoch E` / `Epoch E/N` header line above each line (see `_per_epoch_counter`)
    lines = lines.with_columns(
        text.str.extract(EPOCH_HEADER, 1).cast(pl.Float64, strict=False).forward_fill().alias("_epoch_head")
    )
    if lines.select(text.str.contains(EPOCH_FRAC_BATCH).any()).item():
        lines = lines.with_columns(text.str.replace(EPOCH_FRAC_BATCH, "${1} ${2}/${3} batch ${4}/${5}"))
    token = pl.coalesce(
        text.str.extract(STEP_FIRST, 1),
        text.str.extract(STEP, 1),
        text.str.extract(TRAIN_FRAC, 1),
        text.str.extract(OPEN_COUNTER, 1),
        text.str.extract(BRACKET, 1),
        text.str.extract(GLOG_BRACKET, 1),
        text.str.extract(BRACKET_FRAC, 1),
        text.str.extract(EPOCH_BRACKET, 1),
        text.str.extract(FRAC_EPOCH, 1),
        text.str.extract(ZH_COUNTER, 1),
        text.str.extract(EPOCH_BATCH, 2),
        text.str.extract(NUM_COUNTER, 1),
        text.str.extract(FRAC_VALUE, 1),
        pl.when(pl.lit(_rising_count_values(lines.get_column("text")) > 0)).then(text.str.extract(COUNT_VALUES, 1)),
    )
    # `i/n: x` lines (see FRAC_VALUE) are loss lines when the file has several, and so are rising `i: x y` ones
    fractions = text.str.contains(FRAC_VALUE) | (
        pl.lit(_rising_count_values(lines.get_column("text")) > 0) & text.str.contains(COUNT_VALUES)
    )
    bare = lines.select(fractions.sum()).item() >= MIN_UNCOUNTED
    lossy_lines = lines.filter(
        (text.str.contains(LOSSY) | (fractions & pl.lit(bare))) & ~text.str.contains(FINAL_SUMMARY)
    )
    later = (
        text.str.contains(LOSS_INDEX)
        | text.str.contains(BATCH)
        | text.str.contains(EPOCH_PAREN)
        | text.str.contains(EPOCH_NUM_BRACKET)
    )
    wanted = lossy_lines.filter(token.is_null() & ~later).get_column("line")
    heads = (  # read only when some loss line has no counter of its own
        _head_counters(lines, pl.coalesce(token, text.str.extract(EPOCH_HEADER, 1)))
        if wanted.len()
        else pl.DataFrame(schema={"line": pl.Int64, "_head": pl.String})
    )
    lossy_lines = lossy_lines.with_columns(_raw_bracket(src, wanted)).join(heads, on="line", how="left")
    # the two-line shape is the file's, or none of it: a loss line that merely follows another logger's
    # counter line (RWKV's `Epoch 0, Loss: 0.98` per batch, one in ten after DeepSpeed's `global_step=10`
    # timer line) is no such record
    # (an evaluation's loss line takes the step of the training record before it: it needs no counter)
    loose = lossy_lines.filter(
        token.is_null()
        & text.str.contains(UNCOUNTED_LOSS_ANY)
        & ~text.str.extract(r"(?i)^(.*?)loss", 1).str.contains(EVAL_NAMED).fill_null(False)
    )
    if loose.height and loose.get_column("_head").is_not_null().mean() < UNCOUNTED_SHARE:
        lossy_lines = lossy_lines.with_columns(pl.lit(None, dtype=pl.String).alias("_head"))
    # the line before's counter only for a line with none of its own, `Batch i/n` or `(i/n)` counted (see `later`)
    token = pl.coalesce(
        token, pl.col("_raw_bracket"), text.str.extract(LOSS_INDEX, 2), pl.when(~later).then(pl.col("_head"))
    )
    lossy_lines = lossy_lines.with_columns(*_step(token)).drop("_raw_bracket", "_head")
    lossy_lines = lossy_lines.with_columns(pl.coalesce(pl.col("step"), _batch_step(lossy_lines)).alias("step"))
    closed = text.str.contains(CLOSING_SUMMARY)
    if lossy_lines.select((pl.col("step").is_not_null() & ~closed).sum()).item() >= MIN_UNCOUNTED:
        lossy_lines = lossy_lines.filter(~closed)
    if lossy_lines.get_column("step").null_count() == lossy_lines.height:
        # no other counter anywhere: a loop that logs once per epoch. (In a file with a step, iteration or
        # batch counter, an `Epoch 1/400 ... loss` line is an epoch's summary: PaddleClas's `[Avg]` lines)
        lossy_lines = lossy_lines.with_columns(_step(text.str.extract(EPOCH_FRAC, 1))[0].alias("step"))
        lossy_lines = _lead_counter(_epoch_counter(lossy_lines))
    lossy_lines = _frozen_counter(_epoch_batch_counter(_per_epoch_counter(lossy_lines)))
    # a line that says it is an evaluation before its first loss (`Evaluation result for step 435000:
    # loss = 148890.7 ; perplexity = inf`, `Validation at step 200: loss 2.1`) is an eval record; so is
    # one without a counter (`valid_evaluation: loss=1.83, acc=0.76`), with the step before it
    before_loss = text.str.extract(r"(?i)^(.*?)loss", 1)
    no_counter = pl.col("step").is_null() & before_loss.str.contains(EVAL_NAMED)
    # a whole file of loss lines and no counter anywhere (a loop that prints only its losses: BMN's
    # `BMN training loss(epoch 0): tem_loss: 1.184, ..., total_loss: 1.883`): each line is a training
    # record with no step (CONTRACT: step null where the log prints none), in file order. Also in a mixed log
    # (RWKV's `Epoch 0, Loss: 1.01, Positive Score: ...` beside DeepSpeed's `step=N` lines), when such lines
    # are nearly all of the loss lines left (a traceback's `loss.backward()` lines are the rest)
    lossy_lines = _drop_repeats(lossy_lines)
    shaped = lossy_lines.get_column("text").str.contains(UNCOUNTED_LOSS)
    uncounted = (
        int(shaped.sum()) >= MIN_UNCOUNTED
        and float(shaped.mean()) >= UNCOUNTED_SHARE
        and lossy_lines.get_column("step").null_count() == lossy_lines.height
    )
    cand = lossy_lines.filter(
        pl.col("step").is_not_null() | no_counter | (pl.lit(uncounted) & text.str.contains(UNCOUNTED_LOSS))
    ).with_columns(
        no_counter.alias("_no_counter"),
        (
            before_loss.str.contains(EVAL_WORDS)
            | no_counter
            | _other_phase(lossy_lines, uncounted)
            | pl.col("_in_eval")
        ).alias("_eval"),
    )
    values = _values(cand, pl.col("_eval"))
    # the loss that makes a line a record: not `loss_scale` (`Attempted loss scale: 64` is an fp16 event)
    lossy = (
        values.filter(
            pl.col("name").str.contains("loss")
            & ~pl.col("name").str.starts_with("loss_scale")
            & ~pl.col("name").str.contains(LOSS_SETTING)
        )
        .group_by("line")
        .agg((pl.col("name").str.starts_with("eval_") | pl.col("name").str.starts_with("val")).all().alias("_eval"))
    )
    records = (
        cand.drop("_eval")
        .join(lossy, on="line")
        .sort("line")
        .with_columns(
            pl.when(pl.col("_no_counter"))
            .then(pl.when(~pl.col("_eval")).then(pl.col("step")).forward_fill())
            .otherwise(pl.col("step"))
            .alias("step")
        )
        .select(
            "line",
            "step",
            "step_approx",
            "prefix_rank",
            extract_time(text).alias("time"),
            pl.when(pl.col("_eval")).then(pl.lit("eval")).otherwise(pl.lit("train")).alias("record_kind"),
        )
    )
    values = values.join(records.select("line"), on="line", how="semi")
    unparsed = cand.filter(~pl.col("_no_counter")).join(records.select("line"), on="line", how="anti")
    records, values = one_metric_lines(records, values)
    # a meter whose average turned non-finite while its value is finite (`total_loss: 6.7223 (inf)`, DINOv2's
    # MetricLogger under its `Training  [1250/2500000]` header): metriclogger.py's `_nonfinite_averages`
    from spikeforensics.ingest.metriclogger import AVG_NONFINITE, _nonfinite_averages

    # (only the lines that print such an average; one kind per line: the segments of one physical line share its
    # number, and a line of 9,000 CR-separated records joined to its own records is 81M rows)
    shown = (
        cand.select("line", "text")
        .filter(pl.col("text").str.contains(AVG_NONFINITE))
        .join(records.select("line", "record_kind").unique("line", keep="first"), on="line")
    )
    extra = [e for e in (hidden_nans(records, values), _nonfinite_averages(shown, records)) if e is not None]
    return text_result(
        src.name,
        lines,
        records,
        values,
        unparsed,
        mode="done",
        extra_events=pl.concat(extra, how="diagonal_relaxed") if extra else None,
    )


def _drop_repeats(lossy_lines: pl.DataFrame) -> pl.DataFrame:
    """Without the lines that print again the loss of the step-less line just before them, in a file whose other
    loss lines are all step-less: ColorNet's `train.py` appends `loss: 0.283438444` for every batch and, at each
    epoch's first batch, `Train Epoch:1<TAB>Percent:[0/6751 (0%)]<TAB>Loss:0.283438444` with the same value: one
    batch printed twice, so the per-batch lines are the records (and the repeats no unparsed lines)."""
    number = pl.col("text").str.extract(r"(?i)loss\w*\s*[:=]\s*\[?\s*([-+]?(?:\d[\d.eE+-]*|nan|inf))", 1)
    marked = lossy_lines.with_columns(
        (pl.col("step").is_not_null() & pl.col("step").is_null().shift(1) & (number == number.shift(1)))
        .fill_null(False)
        .alias("_repeat")
    )
    repeat, stepless = marked.get_column("_repeat"), marked.get_column("step").is_null()
    if not repeat.any() or int(stepless.sum()) < MIN_UNCOUNTED or not (stepless | repeat).all():
        return lossy_lines
    return marked.filter(~pl.col("_repeat")).drop("_repeat")


def _other_phase(lossy_lines: pl.DataFrame, uncounted: bool) -> pl.Expr:
    """The evaluation's lines in a file of step-less loss lines (see `parse`): the bars of the smaller total when
    tqdm bars alternate training / validation (`_generic_phases.validation_bars`); else, when some lines name the
    training's loss (TRAIN_NAMED_LOSS), the lines printing a loss that no word names (UNNAMED_LOSS), only when
    there are no more of them than training lines (a loop printing its per-batch `loss: x` beside an epoch's
    `train loss = y` summary has many more)."""
    text = pl.col("text")
    if not uncounted:
        return pl.lit(False)
    bars = validation_bars(lossy_lines, MIN_UNCOUNTED)
    if bars is not None:
        return bars
    named = lossy_lines.get_column("text").str.contains(TRAIN_NAMED_LOSS)
    plain = lossy_lines.get_column("text").str.contains(UNNAMED_LOSS)
    if not named.any() or int(plain.sum()) > int(named.sum()):
        return pl.lit(False)
    return text.str.contains(UNNAMED_LOSS) & ~text.str.contains(EVAL_WORDS)
