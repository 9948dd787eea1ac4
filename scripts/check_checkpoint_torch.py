#!/usr/bin/env python3
"""Load a bumpgrad checkpoint in PyTorch: proof that the format interoperates.

    python3 scripts/check_checkpoint_torch.py CHECKPOINT [--eval-data data/mnist]
        [--model resnet18|resnet50|squeezenet --width-mult W]

CHECKPOINT is a ckpt-*.safetensors file, or a directory (its newest one is
taken). The script

1. checks the header metadata (`format`, `version`) with `safetensors`;
2. recomputes the `checksum` entry from the file (the canonical encoding
   documented in src/checkpoint/format.rs), independently of the Rust code;
3. loads the tensors with `safetensors.torch.load_file` and the six
   parameters (and batch-norm buffers) into bench/pytorch_mnist.py's
   `LanternMnistCnn`, or with --model into bench/models.py's network, with
   `load_state_dict(strict=True)` (any missing, unexpected or mis-shaped
   parameter fails);
4. puts every `optimizer.<param>.momentum_buffer` into a `torch.optim.SGD`'s
   state for that parameter, as PyTorch's own SGD keeps it;
5. runs a forward pass, and with --eval-data the MNIST test accuracy, which
   for a trained checkpoint should match what bumpgrad reported.

It prints OK and exits 0, or says what failed and exits 1.

A checkpoint of the model's initial weights comes from the Rust test suite:

    BUMPGRAD_CHECKPOINT_SAMPLE_DIR=/tmp/ckpt cargo test --release --lib \\
        checkpoint::tests::mnist_names_and_shapes_match_a_pytorch_state_dict
    python3 scripts/check_checkpoint_torch.py /tmp/ckpt

Needs torch and safetensors (`python3 -m pip install torch safetensors`).
"""

import argparse
import hashlib
import json
import struct
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

REPO_ROOT = Path(__file__).resolve().parent.parent
# One definition of the PyTorch model: the benchmark's.
sys.path.insert(0, str(REPO_ROOT / "bench"))
from pytorch_mnist import TEST_IMAGES, TEST_LABELS, LanternMnistCnn, evaluate, load_split  # noqa: E402
from models import build  # noqa: E402

FORMAT = "bumpgrad-checkpoint"
VERSION = "1"
OPTIMIZER_PREFIX = "optimizer."
MOMENTUM_SUFFIX = ".momentum_buffer"


def fail(message):
    print(f"FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def newest_checkpoint(path: Path) -> Path:
    if path.is_file():
        return path
    if not path.is_dir():
        fail(f"{path} is neither a checkpoint file nor a directory")
    files = sorted(path.glob("ckpt-*.safetensors"))
    if not files:
        fail(f"{path} holds no ckpt-*.safetensors")
    # Names carry the step zero-padded, so the last in name order is newest.
    return files[-1]


def canonical_checksum(raw: bytes) -> str:
    """The `checksum` metadata entry, recomputed from the file's bytes."""
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})

    h = hashlib.sha256()

    def put_u64(value):
        h.update(struct.pack("<Q", value))

    def put_str(text):
        encoded = text.encode("utf-8")
        put_u64(len(encoded))
        h.update(encoded)

    # Sorted by UTF-8 bytes, as Rust sorts strings.
    signed = sorted(((k, v) for k, v in metadata.items() if k != "checksum"),
                    key=lambda kv: kv[0].encode("utf-8"))
    put_u64(len(signed))
    for key, value in signed:
        put_str(key)
        put_str(value)
    put_u64(len(header))
    for name in sorted(header, key=lambda k: k.encode("utf-8")):
        entry = header[name]
        put_str(name)
        put_str(entry["dtype"])
        put_u64(len(entry["shape"]))
        for dim in entry["shape"]:
            put_u64(dim)
        begin, end = entry["data_offsets"]
        put_u64(begin)
        put_u64(end)
    h.update(data)
    return "sha256:" + h.hexdigest()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a ckpt-*.safetensors file, or a directory of them")
    parser.add_argument("--eval-data", type=Path, help="MNIST directory: also report test accuracy")
    parser.add_argument("--eval-limit", type=int, default=None, help="evaluate on the first N test images")
    parser.add_argument("--model", default="mnist-cnn",
                        help="the network that wrote it: mnist-cnn, or resnet18/resnet50/squeezenet "
                             "(bench/models.py) for MNIST's 1-channel images")
    parser.add_argument("--width-mult", type=float, default=1.0, help="the run's --width-mult")
    args = parser.parse_args(argv)

    path = newest_checkpoint(args.checkpoint)
    print(f"checkpoint: {path}")

    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    if metadata.get("format") != FORMAT or metadata.get("version") != VERSION:
        fail(f"format {metadata.get('format')!r} version {metadata.get('version')!r}, "
             f"expected {FORMAT!r} version {VERSION!r}")
    print("metadata: " + ", ".join(f"{k}={metadata[k]}" for k in ("epoch", "step", "seed")))
    print(f"config: {metadata.get('config')}")
    extra = {k: v for k, v in metadata.items()
             if k not in ("format", "version", "epoch", "step", "seed", "config", "checksum")}
    if extra:
        print(f"extra: {extra}")

    recorded = metadata.get("checksum")
    computed = canonical_checksum(path.read_bytes())
    if computed != recorded:
        fail(f"checksum: the file records {recorded} but hashes to {computed}")
    print(f"checksum: {computed} (recomputed in Python)")

    tensors = load_file(str(path))
    params = {k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)}
    optimizer_state = {k: v for k, v in tensors.items() if k.startswith(OPTIMIZER_PREFIX)}

    if args.model == "mnist-cnn":
        model = LanternMnistCnn()
    else:
        model = build(args.model, 10, 1, args.width_mult)
    expected = model.state_dict()
    try:
        model.load_state_dict(params, strict=True)
    except RuntimeError as e:
        fail(f"load_state_dict(strict=True): {e}")
    for name, value in model.state_dict().items():
        # num_batches_tracked is int64 in PyTorch, float32 in the file.
        if not torch.equal(value, params[name].to(value.dtype)):
            fail(f"{name} did not load as stored")
        if len(expected) <= 12:
            print(f"  {name:<14} {list(value.shape)} {value.dtype} (state_dict: {list(expected[name].shape)})")

    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    print(f"model: {args.model}, {len(params)} tensors loaded with strict=True")
    by_name = dict(model.named_parameters())
    for key, buffer in optimizer_state.items():
        if not key.endswith(MOMENTUM_SUFFIX):
            fail(f"unknown optimizer state {key}")
        param_name = key[len(OPTIMIZER_PREFIX):-len(MOMENTUM_SUFFIX)]
        param = by_name.get(param_name)
        if param is None or param.shape != buffer.shape:
            fail(f"{key} {list(buffer.shape)} has no parameter of that shape")
        sgd.state[param]["momentum_buffer"] = buffer.clone()
    print(f"optimizer: {len(optimizer_state)} momentum buffers loaded into torch.optim.SGD")

    model.eval()
    with torch.no_grad():
        out = model(torch.zeros(2, 1, 28, 28))
    if out.shape != (2, 10) or not torch.isfinite(out).all():
        fail(f"forward pass gave {out.shape}, finite: {bool(torch.isfinite(out).all())}")

    if args.eval_data:
        x, y = load_split(args.eval_data, TEST_IMAGES, TEST_LABELS, args.eval_limit)
        with torch.no_grad():
            # The MNIST CNN's forward ends in log-softmax; the others give logits.
            scored = model if args.model == "mnist-cnn" else torch.nn.Sequential(model, torch.nn.LogSoftmax(dim=1))
            accuracy, nll = evaluate(scored, x, y, 1000)
        print(f"test accuracy {accuracy:.4f}, mean NLL {nll:.4f} on {x.shape[0]} images")

    print("OK")


if __name__ == "__main__":
    main()
