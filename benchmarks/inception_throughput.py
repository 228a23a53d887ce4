"""Images/s of the inception_fid encoder, side by side with torchmetrics, and the machine's ceiling.

One run, the same images and the same randomly initialised weights for both:

* wmeval: ``build_encoder(inception_fid)`` (pytorch-fid's network, channels-last,
  ``torch.inference_mode``, batched);
* peer: ``torchmetrics.image.fid.FrechetInceptionDistance.update`` (torch-fidelity's
  network, uint8 input), which also accumulates the feature sums;
* ceiling: measured fp32 matmul GFLOP/s divided by the network's FLOPs per image
  (``torch.utils.flop_counter``).

Medians over repeats, interleaved so that machine noise hits both alike.

    pip install -e ".[bench]"
    python benchmarks/inception_throughput.py [--images 64] [--repeats 5] [--size 64]

Needs no downloaded weights (random weights do not change the cost).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch


def matmul_gflops(n: int = 2048, repeats: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t)
    return 2 * n**3 / statistics.median(times) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--size", type=int, default=64, help="input frame side (resized to 299 by both)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "inception_throughput.json"))
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)

    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3
    from torchmetrics.image.fid import FrechetInceptionDistance

    from wmeval.core.config import EncoderConfig
    from wmeval.core.digest import file_sha256
    from wmeval.encoders import build_encoder, fid_architecture

    tmp = Path(tempfile.mkdtemp())
    torch.manual_seed(0)
    ckpt = tmp / "pt_inception-2015-12-05-6726825d.pth"
    torch.save(fid_architecture().state_dict(), ckpt)
    enc = build_encoder(EncoderConfig("inception_fid", "inception_fid", True,
                                      {"weights_sha256": file_sha256(ckpt)}, "cpu", args.batch, str(tmp)))

    # torch-fidelity loads a state dict in its constructor; give it none (random init, same cost).
    empty = tmp / "empty.pth"
    torch.save({}, empty)
    with mock.patch.object(FeatureExtractorInceptionV3, "load_state_dict", lambda self, *a, **k: None):
        peer = FrechetInceptionDistance(feature=2048, feature_extractor_weights_path=str(empty))

    gflops_before = matmul_gflops()
    rng = np.random.default_rng(0)
    frames = rng.random((args.images, args.size, args.size, 3), dtype=np.float32)
    uint8 = torch.from_numpy(np.rint(frames * 255).astype(np.uint8)).permute(0, 3, 1, 2).contiguous()
    enc(frames[:2])
    peer.update(uint8[:2], real=False)

    ours, theirs = [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        enc(frames)
        ours.append(args.images / (time.perf_counter() - t))
        t = time.perf_counter()
        for i in range(0, args.images, args.batch):
            peer.update(uint8[i:i + args.batch], real=False)
        theirs.append(args.images / (time.perf_counter() - t))

    from torch.utils.flop_counter import FlopCounterMode

    x = torch.rand(1, 3, 299, 299)
    net = fid_architecture()
    with FlopCounterMode(display=False) as fc, torch.inference_mode():
        for name in ["Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "maxpool1", "Conv2d_3b_1x1",
                     "Conv2d_4a_3x3", "maxpool2", "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b",
                     "Mixed_6c", "Mixed_6d", "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c", "avgpool"]:
            x = getattr(net, name)(x)
    flops = fc.get_total_flops()
    # The ceiling is the better of two matmul measurements (before and after): a conservative fraction.
    gflops = max(gflops_before, matmul_gflops())
    ceiling = gflops * 1e9 / flops
    res = {
        "images": args.images, "input": f"{args.size}x{args.size}x3, resized to 299", "repeats": args.repeats,
        "batch": args.batch, "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__, "wmeval_images_per_s_median": statistics.median(ours),
        "torchmetrics_images_per_s_median": statistics.median(theirs),
        "ratio_wmeval_over_torchmetrics": statistics.median(ours) / statistics.median(theirs),
        "gflop_per_image": flops / 1e9, "matmul_gflops_fp32": gflops, "ceiling_images_per_s": ceiling,
        "fraction_of_ceiling": statistics.median(ours) / ceiling,
        "all_wmeval": ours, "all_torchmetrics": theirs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if not k.startswith("all_")}, indent=2))


if __name__ == "__main__":
    main()
