"""record_torch_traces.py: torch.profiler traces of the project's bottlenecks, written by
PyTorch itself, with the measured truth of what each planted problem costs.

The same SimpleCNN training step as bench/cnn/torch_reference.py (AdamW, GradScaler,
AMP unless said otherwise, a DataLoader feeding pinned batches) in these variants:

  plain_b64         nothing planted, batch 64
  heavy_b1024       nothing planted, batch 1024 (the GPU has real work)
  heavy_b1024_fp32  as heavy_b1024 with AMP off (fp32 GEMMs and convolutions)
  dataloader_b64    a map-style dataset doing CPU work per sample, num_workers=0
  sync_b64          per-layer activation statistics read with .item() (5 syncs per step)
  sync_b512         the same at batch 512, where the GPU work per layer is larger
  tiny_ops_b64      an EMA of a 1024-element tensor updated in 300 separate small ops
  memory_churn_b64  torch.cuda.empty_cache() every step plus a transient 64 MiB buffer

and the classes whose own time is small but whose knock-on cost is large (docs/diagnosis.md):

  logging_reads_b64    every parameter's gradient norm and weight norm read with .item()
                       after backward, for logging (16 blocking reads per step); fix: none read
  python_ops_b64       a tokenizer in pure Python on the main thread between forward and
                       backward; fix: none (it belongs in the loader)
  pageable_input_b64   a 128 MiB side tensor copied to the GPU every step from pageable
                       memory; fix: the same tensor pinned, copied with non_blocking=True
  bursty_loader_b64    8 DataLoader workers each far slower than the step, so the batches
                       arrive in bursts (most steps wait nothing, every eighth waits long);
                       fix: the pre-made batches of plain_b64
  bursty_busy_b64      the same planted loader; fix: the step reads pre-made batches while
                       the same 8 workers and pin-memory thread are kept busy by a background
                       thread that takes their batches and drops them: the waits go, what
                       the loader costs the host stays (what the data_wait transformation
                       models; bursty_loader_b64's fix removes both)
  nonforeach_adamw_b64 AdamW(foreach=False): one small kernel per parameter and operation;
                       fix: the default multi-tensor (foreach) AdamW
  graphed_b64          nothing planted: the plain step in bf16 autocast without a
                       GradScaler (whose overflow check reads the GPU every step, which no
                       graph can hold) and with AdamW(capturable=True); fix: the same step
                       (forward, backward, optimizer) captured once in a CUDA graph and
                       replayed each step, the batch copied into its static inputs: what
                       the launch_overhead fix's saving is set against

For these the truth is measured in ROUNDS interleaved rounds (ABBA: planted, fixed, fixed,
planted, ...), each a fresh step (model, loader) with its warmup, timed as the mean wall time
per step (a bursty loader's cost is in its few long steps, which a median leaves out); the
saving is 1 - mean(fixed) / mean(planted) over the rounds, with a 95% bootstrap interval over
rounds (saved_lo, saved_hi). Their traces record 8 active steps (bursty_loader_b64: 48,
longer than its workers' queue of 16 batches, after 24 profiler warmup steps: starting the
profiler pauses the step while the workers refill that queue, which the warmup drains).
The other planted variants are measured the same way since 2026-11-29 (late evening):
recordings before it timed each of their rounds as its median step with a sync after every
step (truth.json "measure": "interleaved rounds, median step"), a program other than the
one profiled, whose steps run back to back: the sync made every step of the fixed program
start with an empty GPU queue, which gave a fix that removes in-step syncs no credit for the
host running ahead (a quarter of sync_b512's miss on one TinyLM host, docs/diagnosis.md, "A
third TinyLM host").

Before its trace, each variant's process runs 14 unprofiled warmup steps (the bursty
loaders: 40) and times the last 12, back to back: truth.json's
"same_process_unprofiled_ms", the unprofiled step of the very process that was traced
(and "same_process_unprofiled_fixed_ms", the same for the fixed program's traced process).
Each variant is profiled (schedule wait=1 warmup=1 active=4, 8 for a planted variant (the
bursty loaders: above), CPU+CUDA activities,
profile_memory, record_shapes) into OUT/torch_<variant>.pt.trace.json.gz. The truth is
measured without the profiler, in the rounds above: the variant's step, and the same step
with the planted problem removed ("fixed"); the difference is what removing the problem
saves (a variant with nothing planted: its median step over TIMED steps). The same is measured under the profiler (the median
ProfilerStep of the variant's trace and of a trace of the fixed step, written to --scratch
and removed, or without --scratch kept in OUT as torch_<variant>_fixed.pt.trace.json.gz and
named by truth.json's "fixed_trace": what the host does without the problem, op by op,
for comparing with the planted trace), since a trace can only show the run it recorded. OUT/truth.json (also
printed) holds all of it with the device, torch version and host. Needs a CUDA build of PyTorch; not part of the build or the tests.

With --model lm every variant trains a small decoder-only transformer language model
instead (TinyLM: 4 pre-norm blocks of width 256, 4 heads, causal scaled-dot-product
attention, sequences of 128 tokens from a vocabulary of 4096, untied input and output embeddings, AMP): the same
planted problems in a program of another shape, for checking the verdicts on what they
were not built on. Its batches are token sequences (pre-made and pinned, or made per
sample by the same CPU work as SlowSamples), its per-layer statistics are read after
every block, and truth.json says "model": "lm".

usage: python3 tests/torch/record_torch_traces.py OUT [--timed 40] [--only v1,v2] [--model cnn|lm]
"""
import argparse
import gzip
import json
import os
import platform
import socket
import statistics
import threading
import time
import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

MODEL = "cnn"  # --model: "cnn" (SimpleCNN) or "lm" (TinyLM)
LM_VOCAB = 4096
LM_SEQ = 128


class SimpleCNN(nn.Module):
    def __init__(self, stats_sync=False):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.fc = nn.Linear(128, 10)
        self.stats_sync = stats_sync
        self.stats = []

    def _log(self, x):
        # The planted sync: a per-layer statistic read back to the host at once.
        if self.stats_sync:
            self.stats.append(x.detach().abs().mean().item())

    def forward(self, x):
        x = F.relu(self.conv1(x))
        self._log(x)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        self._log(x)
        x = F.relu(self.conv3(x))
        self._log(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        self._log(x)
        return self.fc(x)


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    """A small decoder-only language model; stats_sync reads a statistic after each block."""

    def __init__(self, stats_sync=False, vocab=LM_VOCAB, d=256, heads=4, layers=4, seq=LM_SEQ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.stats_sync = stats_sync
        self.stats = []

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
            if self.stats_sync:  # the planted sync, as SimpleCNN's
                self.stats.append(x.detach().abs().mean().item())
        return self.head(self.ln(x))


class BatchSet(torch.utils.data.Dataset):
    """Pre-made pinned batches: loading costs next to nothing (the clean pipeline)."""

    def __init__(self, batch, n=8, seed=0):
        g = torch.Generator().manual_seed(seed)
        if MODEL == "lm":  # token sequences and their next tokens
            seqs = [torch.randint(0, LM_VOCAB, (batch, LM_SEQ + 1), generator=g) for _ in range(n)]
            self.x = [z[:, :-1].contiguous().pin_memory() for z in seqs]
            self.y = [z[:, 1:].contiguous().pin_memory() for z in seqs]
            return
        self.x = [torch.randn(batch, 3, 32, 32, generator=g).pin_memory() for _ in range(n)]
        self.y = [torch.randint(0, 10, (batch,), generator=g).pin_memory() for _ in range(n)]

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        return self.x[i % len(self.x)], self.y[i % len(self.y)]


class SlowSamples(torch.utils.data.Dataset):
    """Per-sample CPU work (a decode/augment stand-in), collated by the default collate."""

    def __init__(self, work=12, seed=0):
        self.work = work
        self.lm = MODEL == "lm"  # kept in the dataset: a worker process may not inherit MODEL
        self.g = torch.Generator().manual_seed(seed)

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        img = torch.rand(3, 32, 32, generator=self.g)
        for _ in range(self.work):  # small CPU ops on the sample
            img = (img * 1.01 + 0.01).clamp_(0, 1)
        img = torch.fft.ifft2(torch.fft.fft2(img)).real
        if self.lm:  # the sample's tokens and their next tokens
            toks = (img.flatten()[:LM_SEQ + 1].abs() * LM_VOCAB).long() % LM_VOCAB
            return toks[:-1], toks[1:]
        return img, i % 10


def bursty_loader(batch):
    """8 workers each far slower than the step: batches arrive in bursts."""
    return torch.utils.data.DataLoader(SlowSamples(work=40), batch_size=batch, num_workers=8,
                                       pin_memory=True, prefetch_factor=2, persistent_workers=True)


def busy_loader(batch):
    """bursty_busy_b64's fix: the planted loader kept busy by a background thread that takes
    its batches and drops them, while the step reads pre-made ones. Returns the function that
    stops it (the thread ends after its next batch and lets go of the iterator, whose
    workers then shut down), so one round's workers never run into the next round."""
    stop = threading.Event()
    loader = bursty_loader(batch)

    def drain():
        it = iter(loader)
        while not stop.is_set():
            next(it)
        del it

    t = threading.Thread(target=drain, daemon=True)
    t.start()

    def halt():
        stop.set()
        t.join(timeout=60)

    return halt


def make_loader(variant, batch):
    if variant.startswith("bursty") and not variant.endswith(":fixed"):
        return bursty_loader(batch)
    if variant.startswith("dataloader") and not variant.endswith(":fixed"):
        return torch.utils.data.DataLoader(SlowSamples(), batch_size=batch, num_workers=0,
                                           pin_memory=True)
    return torch.utils.data.DataLoader(BatchSet(batch), batch_size=None, num_workers=0,
                                       pin_memory=False)


def config(variant):
    base = variant.split(":")[0]
    fixed = variant.endswith(":fixed")
    c = dict(batch=64, amp=True, sync=False, tiny=0, churn=False, logging_reads=False, python_ops=False,
             pageable_mib=0, pinned_side=False, foreach=True, bf16=False, scaler=True, capturable=False,
             graph=False)
    if base.startswith("logging_reads") and not fixed:
        c["logging_reads"] = True
    if base.startswith("python_ops") and not fixed:
        c["python_ops"] = True
    if base.startswith("pageable_input"):
        c["pageable_mib"] = 128
        c["pinned_side"] = fixed
    if base.startswith("nonforeach_adamw") and not fixed:
        c["foreach"] = False
    if base.startswith("graphed"):
        c.update(bf16=True, scaler=False, capturable=True, graph=fixed)
    if base.startswith("heavy_b1024"):
        c["batch"] = 1024
    if base == "heavy_b1024_fp32":
        c["amp"] = False
    if base == "sync_b512":
        c["batch"] = 512
    if base.startswith("sync") and not fixed:
        c["sync"] = True
    if base.startswith("tiny_ops") and not fixed:
        c["tiny"] = 300
    if base.startswith("memory_churn") and not fixed:
        c["churn"] = True
    return c


WORDS = ("the quick brown fox jumps over the lazy dog " * 120).split()


def tokenize():
    """python_ops_b64's planted Python work: a toy tokenizer, a few hundred us of interpreter
    time (bench/diagnosis/python_ops_probe.py times it alone and inside the step)."""
    vocab = {}
    ids = []
    for w in WORDS:
        for k in range(1, len(w) + 1):
            ids.append(vocab.setdefault(w[:k], len(vocab)))
    return ids


def ema_updates(t, ops):
    """tiny_ops_b64's planted tiny kernels: `ops` separate in-place updates of t, an EMA
    (bench/diagnosis/python_ops_probe.py --where end runs them outside the step too)."""
    with torch.no_grad():
        for _ in range(ops // 2):
            t.mul_(0.999).add_(0.001)


def trace_settings():
    """What every torch.profiler session of tests/torch and its probes records: CPU and
    CUDA activities, shapes and memory (bench/diagnosis/phase_probe.py, python_ops_probe.py)."""
    return dict(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
                record_shapes=True)


def forward_loss(model, x, y, amp_dtype, amp=True):
    """The step's forward pass and loss, under autocast to amp_dtype where amp is on: one
    definition for the eager step and the graphed one (graphed_step), so the two compute the
    same thing."""
    with torch.autocast("cuda", dtype=amp_dtype, enabled=amp):
        out = model(x)
        return F.cross_entropy(out.flatten(0, -2), y.flatten())


def make_step(variant, mark=None):
    """The training step of a variant and its config. mark, where given, is called with a
    phase's name as each phase of the step ends, on the host's clock (no synchronization):
    load, fwd, gap (python_ops' tokenizer), bwd, reads (logging_reads), opt, ema
    (tiny_ops), churn (memory_churn); bench/diagnosis/phase_probe.py times them."""
    c = config(variant)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = (TinyLM if MODEL == "lm" else SimpleCNN)(stats_sync=c["sync"]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2, foreach=c["foreach"],
                            capturable=c["capturable"])
    scaler = torch.amp.GradScaler("cuda", enabled=c["amp"] and c["scaler"])
    amp_dtype = torch.bfloat16 if c["bf16"] else torch.float16
    ema = torch.zeros(1024, device=dev)
    it = iter(make_loader(variant, c["batch"]))
    halt_busy = busy_loader(c["batch"]) if variant == "bursty_busy_b64:fixed" else None
    side = None
    if c["pageable_mib"]:
        side = torch.randn(c["pageable_mib"] << 18)  # 4-byte floats: MiB << 18 of them
        if c["pinned_side"]:
            side = side.pin_memory()
    norms = []

    def step():
        x, y = next(it)
        x = x.to(dev, non_blocking=True)
        y = y.to(dev, non_blocking=True)
        if mark:
            mark("load")
        opt.zero_grad(set_to_none=True)
        if side is not None:
            side_dev = side.to(dev, non_blocking=c["pinned_side"])
            del side_dev
        loss = forward_loss(model, x, y, amp_dtype, c["amp"])
        if mark:
            mark("fwd")
        if c["python_ops"]:
            tokenize()
            if mark:
                mark("gap")
        scaler.scale(loss).backward()
        if mark:
            mark("bwd")
        if c["logging_reads"]:
            norms.clear()
            for p in model.parameters():  # the planted reads: one sync each
                norms.append(p.grad.norm().item())
                norms.append(p.detach().norm().item())
            if mark:
                mark("reads")
        scaler.step(opt)
        scaler.update()
        model.stats.clear()
        if mark:
            mark("opt")
        if c["tiny"]:
            ema_updates(ema, c["tiny"])  # the planted tiny kernels: one EMA update per op
            if mark:
                mark("ema")
        if c["churn"]:
            scratch = torch.empty(16 << 20, device=dev)  # 64 MiB, freed at once
            scratch.zero_()
            del scratch
            torch.cuda.empty_cache()  # the planted churn: the cache is handed back
            if mark:
                mark("churn")
        return loss

    if halt_busy is not None:
        weakref.finalize(step, halt_busy)  # the busy loader lives as long as this step
    if c["graph"]:
        return graphed_step(model, opt, it, amp_dtype, mark), c
    return step, c


def graphed_step(model, opt, it, amp_dtype, mark=None):
    """graphed_b64's fix: forward, backward and the optimizer step captured once in a CUDA
    graph (torch's whole-network capture: three warmup iterations on a side stream, then
    the capture with the gradients unset, so backward writes them from the graph's pool);
    each step copies its batch into the static inputs and replays the graph."""
    dev = torch.device("cuda")
    x0, y0 = next(it)
    static_x = x0.to(dev)
    static_y = y0.to(dev)

    def body():
        loss = forward_loss(model, static_x, static_y, amp_dtype)
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = body()

    def step():
        x, y = next(it)
        static_x.copy_(x, non_blocking=True)
        static_y.copy_(y, non_blocking=True)
        if mark:
            mark("load")
        graph.replay()
        if mark:
            mark("opt")
        return static_loss

    return step


def timed_ms(variant, steps, warmup=10):
    step, _ = make_step(variant)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()  # each step timed whole, as the profiler's step range
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def profiled_step_ms(path, mean=False):
    """Median (or mean) ProfilerStep#N duration of an exported trace, in ms."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    durs = [e["dur"] / 1e3 for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    if not durs:
        return float("nan")
    return statistics.mean(durs) if mean else statistics.median(durs)


def wall_ms(variant, steps, warmup):
    """Mean wall time per step over `steps` steps after `warmup`, in ms (a fresh step)."""
    step, _ = make_step(variant)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / steps


def interleaved(variant, rounds, steps, warmup, per_round, seed=1):
    """ABBA rounds of the planted and the fixed step, each round a fresh step timed by
    per_round(variant, steps, warmup); returns (planted ms list, fixed ms list, saving, lo,
    hi), the interval a 95% bootstrap over rounds."""
    import random
    off, on = [], []
    for r in range(rounds):
        order = [variant, variant + ":fixed"] if r % 2 == 0 else [variant + ":fixed", variant]
        for v in order:
            (on if v.endswith(":fixed") else off).append(per_round(v, steps, warmup))
    mean = statistics.mean
    sv = 1.0 - mean(on) / mean(off)
    rng = random.Random(seed)
    xs = sorted(1.0 - mean([rng.choice(on) for _ in on]) / mean([rng.choice(off) for _ in off])
                for _ in range(2000))
    return off, on, sv, xs[50], xs[1949]


def record(variant, out):
    """Traces variant into out; returns the trace's path, the step's config and the mean
    wall time per step of the same process's last 12 unprofiled warmup steps (back to
    back, one sync at the end; a bursty loader's first steps, fed from its full queue,
    are left out): the same-process figure the predicted unprofiled step is set against,
    free of the 15-25% between processes."""
    step, c = make_step(variant)
    active = ACTIVE.get(variant.split(":")[0], 4)
    warm = WARMUP.get(variant.split(":")[0], 14)
    assert warm > 2, "the same-process timing needs warmup steps after the first two"
    first = max(2, warm - 12)
    t0 = None
    for i in range(warm):
        if i == first:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        step()
    torch.cuda.synchronize()
    same_ms = (time.perf_counter() - t0) * 1e3 / (warm - first)
    name = variant.replace(":", "_")
    path = os.path.join(out, f"torch_{name}.pt.trace.json.gz")
    with profile(schedule=schedule(wait=1, warmup=PROF_WARMUP.get(variant.split(":")[0], 1), active=active, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path), **trace_settings()) as prof:
        for _ in range(1 + PROF_WARMUP.get(variant.split(":")[0], 1) + active):
            step()
            prof.step()
    torch.cuda.synchronize()
    return path, c, same_ms


VARIANTS = ["plain_b64", "heavy_b1024", "heavy_b1024_fp32", "dataloader_b64", "sync_b64",
            "sync_b512", "tiny_ops_b64", "memory_churn_b64"]
PLANTED = {"dataloader_b64": "dataloader", "sync_b64": "sync", "sync_b512": "sync",
           "tiny_ops_b64": "launch_overhead", "memory_churn_b64": "allocator_churn"}
# The classes with a small own time and a large knock-on cost, measured interleaved.
INTERLEAVED = {"logging_reads_b64": "sync", "python_ops_b64": "host_code",
               "pageable_input_b64": "pageable_copy", "bursty_loader_b64": "dataloader",
               "bursty_busy_b64": "dataloader", "nonforeach_adamw_b64": "launch_overhead",
               "graphed_b64": "cuda_graph"}
VARIANTS += list(INTERLEAVED)
PLANTED.update(INTERLEAVED)
# Every planted variant's trace holds 8 steps (the classic ones held 4 before 2026-11-29,
# night: a window short enough for one slow moment of the host to move its replay).
ACTIVE = {v: 8 for v in PLANTED}
ACTIVE["bursty_loader_b64"] = ACTIVE["bursty_busy_b64"] = 48
# Steps before the trace or the timing: a bursty loader's workers first fill their queues
# (8 workers x prefetch 2 batches), which the first steps drain without waiting.
WARMUP = {"bursty_loader_b64": 40, "bursty_busy_b64": 40}
# The profiler's own warmup steps: starting CUPTI pauses the step long enough for the
# workers to refill their queue, and a trace that begins there shows 16 steps that never
# wait; 24 warmup steps drain it before the recording starts.
PROF_WARMUP = {"bursty_loader_b64": 24, "bursty_busy_b64": 24}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--timed", type=int, default=40)
    ap.add_argument("--only", default="")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds per side (ABBA)")
    ap.add_argument("--scratch", default="", help="folder for the fixed variants' traces (removed)")
    ap.add_argument("--model", choices=("cnn", "lm"), default="cnn",
                    help="the program trained: SimpleCNN or the TinyLM transformer")
    a = ap.parse_args()
    global MODEL
    MODEL = a.model
    os.makedirs(a.out, exist_ok=True)
    if a.scratch:
        os.makedirs(a.scratch, exist_ok=True)
    variants = [v for v in VARIANTS if not a.only or v in a.only.split(",")]
    truth = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": socket.gethostname(),
        "cpu": platform.processor() or platform.machine(),
        "timed_steps": a.timed,
        "model": a.model,
        "variants": {},
    }
    for v in variants:
        path, c, same_ms = record(v, a.out)
        planted = v in PLANTED
        entry = {"trace": os.path.basename(path), "config": c, "planted": PLANTED.get(v, "none")}
        entry["same_process_unprofiled_ms"] = round(same_ms, 3)
        entry["profiled_step_ms"] = round(profiled_step_ms(path, mean=planted), 3)
        if planted:
            # Every planted variant by its mean wall time per step, steps back to back as
            # in the profiled window the replay reads (a bursty loader's cost is in a few
            # long steps, which a median leaves out).
            off, on, sv, lo, hi = interleaved(v, a.rounds, a.timed, WARMUP.get(v, 10), wall_ms)
            ms = statistics.mean(off)
            entry["step_ms"] = round(ms, 3)
            entry["fixed_step_ms"] = round(statistics.mean(on), 3)
            entry["rounds_ms"] = {"planted": [round(x, 3) for x in off], "fixed": [round(x, 3) for x in on]}
            entry["saved_ms"] = round(entry["step_ms"] - entry["fixed_step_ms"], 3)
            entry["saved_share"] = round(sv, 4)
            entry["saved_lo"] = round(lo, 4)
            entry["saved_hi"] = round(hi, 4)
            entry["measure"] = "interleaved rounds, mean wall per step"
            # The same under the profiler: what a trace of this run can show.
            fpath, _, fsame = record(v + ":fixed", a.scratch or a.out)
            entry["same_process_unprofiled_fixed_ms"] = round(fsame, 3)
            pf = profiled_step_ms(fpath, mean=True)
            if a.scratch:
                os.remove(fpath)
            else:  # kept beside the planted one: the same program without the problem, traced
                entry["fixed_trace"] = os.path.basename(fpath)
            p = entry["profiled_step_ms"]
            entry["profiled_fixed_step_ms"] = round(pf, 3)
            entry["profiled_saved_share"] = round((p - pf) / p, 4)
        else:
            ms = timed_ms(v, a.timed)
            entry["step_ms"] = round(ms, 3)
        truth["variants"][v] = entry
        with open(os.path.join(a.out, "truth.json"), "w") as f:  # kept if a later variant fails
            json.dump(truth, f, indent=1)
        print(f"{v:18s} step {ms:8.3f} ms  " +
              (f"fixed {entry['fixed_step_ms']:8.3f} ms  saved {entry['saved_share']*100:5.1f}%  "
               f"profiled: saved {entry['profiled_saved_share']*100:5.1f}%"
               if v in PLANTED else ""), flush=True)
    with open(os.path.join(a.out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps(truth))


if __name__ == "__main__":
    main()
