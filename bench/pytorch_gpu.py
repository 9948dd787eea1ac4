#!/usr/bin/env python3
"""PyTorch on the GPU: the anchor that bumpgrad's GPU figures are judged by.

The same model, initialisation, optimiser and data rules as
bench/pytorch_mnist.py (whose IDX reader and model this imports), arranged the
way a careful PyTorch user would run it on a GPU, so that the comparison is
against PyTorch at its best rather than a naive port:

- **Data resident on the device as bytes.** The 60,000 training and 10,000
  test images stay uint8 on the GPU (as bumpgrad keeps them), with their
  labels. Each step gathers its batch by index on the device and normalises
  it there, (pixel/255 - 0.1307)/0.3081.
- **The order is drawn on the device.** Epoch e is shuffled by
  `torch.randperm` with a device generator seeded with seed+e.
- **No host sync per step.** The loss is accumulated on the device and read
  once, at the end of the epoch.
- **Plain fp32.** TF32 is off for convolutions and matrix products, so the
  arithmetic is the same precision as bumpgrad's.

Three modes:

    eager       PyTorch as written.
    benchmark   eager with torch.backends.cudnn.benchmark = True (cuDNN times
                its algorithms once per shape and keeps the fastest).
    graph       the whole training step (gather from a static index tensor,
                forward, loss, backward, optimizer.step, loss accumulation)
                captured once in one torch.cuda.graph after a few warm-up steps
                on a side stream, as in PyTorch's "whole-network capture"
                recipe, then replayed: per step only
                `static_idx.copy_(order[i*b:(i+1)*b])` and `graph.replay()`.
                The warm-up steps train, so the initial weights are saved
                before and restored after: every mode starts from the same
                weights. A ragged last batch (training set size not a multiple
                of --batch) is DROPPED in graph mode, since the graph is built
                for one batch shape; its size is reported as
                `dropped_examples`. With 60,000 examples and batch 100 or 1000
                there is none. Eager and benchmark keep it.

stdout carries one JSON object per epoch (human text goes to stderr):

    epoch, train_loss, test_accuracy (fraction), test_loss, seconds,
    eval_seconds, steps, step_memory_bytes, [step_reserved_bytes,]
    device_used_bytes, device_total_bytes, kernels_per_step, mode, batch, ...

- `seconds` is the epoch's training time, the device synchronised before each
  clock reading; evaluation (full test set, batch 1000, no_grad, eval mode)
  is excluded and reported as `eval_seconds`.
- `step_memory_bytes` is what training needs above data + model + optimizer:
  the peak of `torch.cuda.max_memory_allocated()` over the training of the
  epochs so far, minus `memory_allocated()` after setup. Evaluation is kept
  out of it (the peak counters are reset after each evaluation).
- `step_reserved_bytes` (graph mode only) is `max_memory_reserved()` minus the
  reserved bytes after setup: the graph's private memory pool shows there.
  `graph_pool_bytes` is the reserved bytes above setup right after capture.
  Blocks cached by evaluation are released after each evaluation in this mode
  (training allocates nothing then, so that costs its timing nothing).
- `device_used_bytes` is total - free from `torch.cuda.mem_get_info()` after
  the epoch's evaluation: everything the process holds on the device, CUDA
  context, cuDNN/cuBLAS handles and caching-allocator pools included.
- `kernels_per_step` counts the CUDA kernels (memcpy/memset excluded) that a
  few eager steps launch, under torch.profiler, divided by the steps. It is
  measured once before timing on a throwaway copy of the model (with the RNG
  state forked), so training is unaffected. A graph replays the same kernels.

On the CPU (`--device cpu`, for testing the script where there is no GPU)
the memory and kernel fields are null, and graph mode is refused.

    python3 bench/pytorch_gpu.py --mode graph --epochs 4 --batch 100
"""

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# bench/ is not a package: run as a script, this file's folder is on sys.path.
from cli_args import positive_int
from pytorch_mnist import (MNIST_MEAN, MNIST_STD, REPO_ROOT, TEST_IMAGES,
                           TEST_LABELS, TRAIN_IMAGES, TRAIN_LABELS,
                           LanternMnistCnn, log, read_idx, sync)

MODES = ("eager", "benchmark", "graph")
MIB = 2 ** 20

# (pixel/255 - mean)/std as one multiply and one add; torch.mul of a uint8
# tensor by a Python float yields float32, so the cast is fused into the
# multiply: two kernels instead of the four of the literal formula.
PIXEL_SCALE = 1.0 / (255.0 * MNIST_STD)
PIXEL_SHIFT = -MNIST_MEAN / MNIST_STD

# PyTorch's capture recipe runs a few iterations on a side stream first, so
# that lazy initialisation (cuBLAS/cuDNN handles, autograd's streams,
# allocator pools) does not happen during capture.
GRAPH_WARMUP_STEPS = 3

# Kernel counting: steps run before the profiler starts (first-call set-up,
# cudnn.benchmark's trials), then steps profiled and averaged over.
PROFILE_WARMUP_STEPS = 2
PROFILE_STEPS = 5


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

class ResidentMnist:
    """Both splits as uint8 images (N, 28, 28) and int64 labels on the device.

    Bytes, not floats: the same 52 MB bumpgrad keeps in its persistent region,
    so the data set costs both frameworks the same and normalising is part of
    every step for both.
    """

    def __init__(self, data_dir: Path, device: torch.device, train_limit=None):
        self.train_images, self.train_labels = self._load(
            data_dir, TRAIN_IMAGES, TRAIN_LABELS, device, train_limit)
        self.test_images, self.test_labels = self._load(
            data_dir, TEST_IMAGES, TEST_LABELS, device, None)

    @staticmethod
    def _load(data_dir, images_name, labels_name, device, limit):
        images = read_idx(data_dir, images_name)
        labels = read_idx(data_dir, labels_name)
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{images_name} has {images.shape[0]} images but "
                             f"{labels_name} has {labels.shape[0]} labels")
        if limit is not None:
            if not 0 < limit <= images.shape[0]:
                raise ValueError(f"--train-limit must be in 1..={images.shape[0]}")
            # The first N examples, the subset bumpgrad's --train-limit keeps.
            images, labels = images[:limit], labels[:limit]
        # np.frombuffer arrays are read-only; copy before handing to torch.
        return (torch.from_numpy(images.copy()).to(device),
                torch.from_numpy(labels.astype("int64")).to(device))

    @property
    def train_size(self):
        return self.train_images.shape[0]


def normalise(images_u8):
    """uint8 (B, 28, 28) -> float32 (B, 1, 28, 28), MNIST-normalised."""
    return torch.mul(images_u8, PIXEL_SCALE).add_(PIXEL_SHIFT).unsqueeze(1)


# --------------------------------------------------------------------------
# The training step, shared by every mode (and by the kernel count)
# --------------------------------------------------------------------------

def train_step(model, optimizer, data, idx, loss_sum):
    """One SGD step on the training examples at `idx`, entirely on the device.

    The loss is added into `loss_sum` rather than returned, so no step waits
    for the device; captured in a graph, the addition is part of the replay.
    """
    x = normalise(data.train_images.index_select(0, idx))
    y = data.train_labels.index_select(0, idx)
    optimizer.zero_grad(set_to_none=True)
    loss = F.nll_loss(model(x), y)
    loss.backward()
    optimizer.step()
    loss_sum.add_(loss.detach())


def eager_epoch(model, optimizer, data, order, batch, loss_sum):
    """Eager steps over `order`; a ragged last batch is kept. Returns steps."""
    steps = 0
    for start in range(0, order.numel(), batch):
        train_step(model, optimizer, data, order[start:start + batch], loss_sum)
        steps += 1
    return steps


def capture_training_step(model, optimizer, data, static_idx, loss_sum):
    """Capture one whole training step in a CUDA graph; return the graph.

    Follows PyTorch's whole-network capture recipe: warm-up iterations on a
    side stream, then capture (on that same stream). The warm-up steps update the weights, so they
    are saved first and copied back (in place: the graph holds their
    addresses) once the capture is done. Capturing launches nothing, so the
    restored weights are exactly the initial ones.
    """
    saved = [p.detach().clone() for p in model.parameters()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_STEPS):
            train_step(model, optimizer, data, static_idx, loss_sum)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    # Captured on the warm-up stream, so per-stream lazy state (library
    # workspaces) already exists when capture starts. train_step's
    # zero_grad(set_to_none=True) inside the capture means the gradients are
    # allocated from the graph's private pool, as the recipe does by calling
    # it just before capturing.
    with torch.cuda.graph(graph, stream=side):
        train_step(model, optimizer, data, static_idx, loss_sum)

    with torch.no_grad():
        for param, initial in zip(model.parameters(), saved):
            param.copy_(initial)
    return graph


def graph_epoch(graph, static_idx, order, batch):
    """Replay the captured step over `order`'s full batches. Returns steps.

    The ragged remainder, if any, is dropped: the graph has one batch shape.
    """
    steps = order.numel() // batch
    for i in range(steps):
        static_idx.copy_(order[i * batch:(i + 1) * batch])
        graph.replay()
    return steps


# --------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------

@torch.no_grad()
def evaluate(model, data, batch):
    """Test accuracy (fraction) and mean NLL over the full test set.

    Eval mode (dropout off), sums kept on the device, one read at the end.
    """
    model.eval()
    images, labels = data.test_images, data.test_labels
    correct = torch.zeros((), dtype=torch.int64, device=images.device)
    nll_sum = torch.zeros((), device=images.device)
    for start in range(0, images.shape[0], batch):
        out = model(normalise(images[start:start + batch]))
        target = labels[start:start + batch]
        nll_sum += F.nll_loss(out, target, reduction="sum")
        correct += (out.argmax(dim=1) == target).sum()
    model.train()
    n = images.shape[0]
    return correct.item() / n, nll_sum.item() / n


# --------------------------------------------------------------------------
# Measurements: kernels and memory
# --------------------------------------------------------------------------

def is_memory_operation(event_name):
    """Copies and fills are device activities but not kernel launches."""
    return event_name.startswith(("Memcpy", "Memset"))


def count_kernels_per_step(model, data, batch, lr, device):
    """CUDA kernels one eager training step launches (None on the CPU).

    Runs on a deep copy of the model with its own optimizer and with the RNG
    state forked, so neither the weights nor the dropout masks of the real
    run change. A few unprofiled steps come first so that one-off work
    (handle creation, cudnn.benchmark's trials) is not counted.
    """
    if device.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    twin = copy.deepcopy(model)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=lr)
    idx = torch.arange(min(batch, data.train_size), device=device)
    loss_sum = torch.zeros((), device=device)
    with torch.random.fork_rng(devices=[device]):
        for _ in range(PROFILE_WARMUP_STEPS):
            train_step(twin, twin_optimizer, data, idx, loss_sum)
        sync(device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILE_STEPS):
                train_step(twin, twin_optimizer, data, idx, loss_sum)
            sync(device)
    kernels = sum(1 for e in prof.events()
                  if e.device_type == DeviceType.CUDA and not is_memory_operation(e.name))
    return kernels / PROFILE_STEPS


class MemoryMeter:
    """Device memory of training, above the state after setup (CUDA only).

    `start` takes the baseline (allocated and reserved bytes once data, model
    and optimizer exist) and resets the peak counters; `training_done` folds
    the peaks of the epoch's training into running maxima; `evaluation_done`
    resets the counters again so evaluation's batches never count as
    training memory. On the CPU every figure is None.
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self.base_allocated = self.base_reserved = 0
        self.step_peak = self.reserved_peak = None

    def start(self):
        if not self.cuda:
            return
        sync(self.device)
        self.base_allocated = torch.cuda.memory_allocated(self.device)
        self.base_reserved = torch.cuda.memory_reserved(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.step_peak = self.reserved_peak = 0

    def training_done(self):
        if not self.cuda:
            return
        self.step_peak = max(self.step_peak,
                             torch.cuda.max_memory_allocated(self.device) - self.base_allocated)
        self.reserved_peak = max(self.reserved_peak,
                                 torch.cuda.max_memory_reserved(self.device) - self.base_reserved)

    def evaluation_done(self):
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def device_used_and_total(self):
        """(total - free, total) over the whole device, as the driver sees it."""
        if not self.cuda:
            return None, None
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free, total


# --------------------------------------------------------------------------
# Set-up
# --------------------------------------------------------------------------

def configure_backends(mode):
    """fp32 without TF32 (as bumpgrad computes), and cudnn.benchmark per mode."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = mode == "benchmark"


def versions(device):
    """What produced the figures: torch, its CUDA and cuDNN, the GPU's name."""
    info = {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": (torch.backends.cudnn.version()
                          if torch.backends.cudnn.is_available() else None),
        "device": str(device),
        "device_name": None,
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    return info


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Train Lantern's MNIST CNN in PyTorch on a GPU with the data "
                    "resident on the device, eagerly, with cudnn.benchmark, or "
                    "as one CUDA graph per step; one JSON object per epoch on "
                    "stdout.")
    p.add_argument("--data", type=Path, default=REPO_ROOT / "data" / "mnist",
                   help="directory with the four MNIST IDX files, gzipped or raw "
                        "(default: data/mnist under the repository root)")
    p.add_argument("--epochs", type=positive_int, default=4,
                   help="training epochs (default: 4)")
    p.add_argument("--batch", type=positive_int, default=100,
                   help="training minibatch size (default: 100)")
    p.add_argument("--lr", type=float, default=0.05,
                   help="SGD learning rate (default: 0.05)")
    p.add_argument("--seed", type=int, default=1,
                   help="seeds initialisation and dropout; epoch e is shuffled "
                        "by a device generator seeded with seed+e (default: 1)")
    p.add_argument("--mode", choices=MODES, default="eager",
                   help="eager (default), benchmark (eager with "
                        "cudnn.benchmark) or graph (whole step in one CUDA graph)")
    p.add_argument("--device", default="cuda",
                   help="torch device: cuda (default), cuda:N, or cpu for "
                        "testing without a GPU (no graph mode there)")
    p.add_argument("--eval-batch", type=positive_int, default=1000,
                   help="test evaluation batch size (default: 1000)")
    p.add_argument("--train-limit", type=positive_int, default=None, metavar="N",
                   help="train on the first N training examples only; for quick "
                        "checks, not for figures")
    args = p.parse_args(argv)
    args.device = torch.device(args.device)
    if args.device.type == "cuda":
        if not torch.cuda.is_available():
            p.error("--device cuda, but torch.cuda.is_available() is False "
                    f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
        if args.device.index is None:
            # torch.cuda.set_device, mem_get_info and fork_rng want an index.
            args.device = torch.device("cuda", torch.cuda.current_device())
    if args.mode == "graph" and args.device.type != "cuda":
        p.error(f"--mode graph needs a CUDA device (CUDA graphs do not exist on "
                f"{args.device}); use --mode eager there")
    return args


def measure_kernels(model, data, batch, lr, device):
    """kernels_per_step, or None; leaves the allocator as it found it.

    A failing profiler (CUPTI missing, say) costs the figure, not the run.
    """
    try:
        kernels = count_kernels_per_step(model, data, batch, lr, device)
    except Exception as error:  # noqa: BLE001 - a side figure must not sink the run
        log(f"warning: counting kernels with torch.profiler failed ({error}); "
            "kernels_per_step will be null")
        kernels = None
    if device.type == "cuda":
        # Return what the throwaway copy cached, so the memory baseline is
        # data + model + optimizer and nothing else.
        torch.cuda.empty_cache()
    if kernels is not None:
        log(f"kernels per eager step: {kernels:g}")
    return kernels


def prepare_graph(model, optimizer, data, static_idx, loss_sum, meter, batch):
    """Capture the step (graph mode); return the graph and facts for the record."""
    device = static_idx.device
    sync(device)
    started = time.perf_counter()
    graph = capture_training_step(model, optimizer, data, static_idx, loss_sum)
    sync(device)
    facts = {
        "capture_seconds": time.perf_counter() - started,
        # torch.cuda.graph empties the cache as it starts, so what is reserved
        # above setup now is essentially the graph's private pool (the
        # reserved peak, step_reserved_bytes, may instead be the warm-up's).
        "graph_pool_bytes": torch.cuda.memory_reserved(device) - meter.base_reserved,
        "dropped_examples": data.train_size % batch,
    }
    log(f"captured the training step in {facts['capture_seconds']:.2f} s after "
        f"{GRAPH_WARMUP_STEPS} warm-up steps"
        + (f"; the last {facts['dropped_examples']} examples of each epoch are "
           "dropped (ragged batch)" if facts["dropped_examples"] else ""))
    return graph, facts


def timed_epoch(epoch, args, model, optimizer, data, loss_sum, graph, static_idx):
    """Train one epoch; return (steps, seconds, mean loss).

    The clock covers drawing the order and every step, the device
    synchronised before each reading; the loss is read after it stops.
    """
    device = args.device
    generator = torch.Generator(device=device).manual_seed(args.seed + epoch)
    loss_sum.zero_()
    sync(device)
    started = time.perf_counter()
    order = torch.randperm(data.train_size, generator=generator, device=device)
    if graph is not None:
        steps = graph_epoch(graph, static_idx, order, args.batch)
    else:
        steps = eager_epoch(model, optimizer, data, order, args.batch, loss_sum)
    sync(device)
    seconds = time.perf_counter() - started
    return steps, seconds, loss_sum.item() / steps


def main(argv=None):
    args = parse_args(argv)
    device, mode, batch = args.device, args.mode, args.batch
    if device.type == "cuda":
        torch.cuda.set_device(device)
    configure_backends(mode)
    # Initialisation and dropout draw from the global generators.
    torch.manual_seed(args.seed)

    t0 = time.perf_counter()
    data = ResidentMnist(args.data, device, args.train_limit)
    model = LanternMnistCnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_sum = torch.zeros((), device=device)
    static_idx = torch.arange(batch, device=device) if mode == "graph" else None
    setup_seconds = time.perf_counter() - t0
    if mode == "graph" and batch > data.train_size:
        sys.exit(f"error: --batch {batch} exceeds the {data.train_size} training "
                 "examples; graph mode needs one full batch")

    info = versions(device)
    log(f"pytorch {info['torch_version']} (CUDA {info['cuda_version']}, cuDNN "
        f"{info['cudnn_version']}) on {device}"
        + (f" ({info['device_name']})" if info["device_name"] else ""))
    log(f"mode {mode}, epochs {args.epochs}, batch {batch}, lr {args.lr}, "
        f"seed {args.seed}; {data.train_size} train / {data.test_images.shape[0]} "
        f"test examples resident as uint8, set up in {setup_seconds:.2f} s")

    kernels_per_step = measure_kernels(model, data, batch, args.lr, device)
    meter = MemoryMeter(device)
    meter.start()
    graph, graph_facts = None, {"dropped_examples": 0}
    if mode == "graph":
        graph, graph_facts = prepare_graph(model, optimizer, data, static_idx,
                                           loss_sum, meter, batch)

    for epoch in range(1, args.epochs + 1):
        steps, seconds, train_loss = timed_epoch(epoch, args, model, optimizer, data,
                                                 loss_sum, graph, static_idx)
        meter.training_done()

        t_eval = time.perf_counter()
        test_accuracy, test_loss = evaluate(model, data, args.eval_batch)
        sync(device)
        eval_seconds = time.perf_counter() - t_eval
        device_used, device_total = meter.device_used_and_total()
        meter.evaluation_done()
        if graph is not None:
            # Evaluation's cached blocks would otherwise count as reserved in
            # the next epochs; graph training allocates only each epoch's
            # order, so returning them costs its timing next to nothing.
            torch.cuda.empty_cache()

        record = {
            "epoch": epoch,
            "train_loss": train_loss,
            "test_accuracy": test_accuracy,
            "test_loss": test_loss,
            "seconds": seconds,
            "eval_seconds": eval_seconds,
            "steps": steps,
            "step_memory_bytes": meter.step_peak,
            "device_used_bytes": device_used,
            "device_total_bytes": device_total,
            "setup_allocated_bytes": meter.base_allocated if meter.cuda else None,
            "kernels_per_step": kernels_per_step,
            "mode": mode,
            "batch": batch,
            "train_examples": data.train_size,
            "framework": "pytorch",
            **graph_facts,
            **info,
        }
        if graph is not None:
            record["step_reserved_bytes"] = meter.reserved_peak
        print(json.dumps(record), flush=True)
        log(f"epoch {epoch}: train loss {train_loss:.4f}, test accuracy "
            f"{100 * test_accuracy:.2f}%, train {seconds:.3f} s ({steps} steps), "
            f"eval {eval_seconds:.3f} s"
            + (f", step memory {meter.step_peak / MIB:.2f} MiB" if meter.cuda else ""))


if __name__ == "__main__":
    main()
