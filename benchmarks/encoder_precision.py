"""Reduced precision for encoders: throughput, and its effect on the embeddings and on FD, beside fp32.

One run on this machine, interleaved repeats (medians), the same frames for every precision:

* encoders: ``random_conv`` (the default weight-free conv net, 64 x 64 input) and the ``inception_fid``
  architecture (pytorch-fid's network at 299 x 299) with seeded random weights: the real weights cannot be
  downloaded here, and random weights have the same cost, though their rounding errors may differ;
* frames: the pipeline's blobs ground truth against its ``reversed`` model (``data/rollouts/blobs``, after
  ``dvc repro``), two sets of ``--images`` frames;
* per precision: images/s; the embeddings' relative error against fp32 per row (``||e - e_fp32|| /
  ||e_fp32||``: the largest and the median); and the Frechet distance between the two sets, with its relative
  change against fp32.

``bf16`` on a CPU without AVX512-BF16/AMX is emulated by torch (the JSON records whether this CPU has it);
``tf32`` is CUDA-only and is measured only where a GPU is present.

    python benchmarks/encoder_precision.py [--images 256] [--inception-images 48] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

ROOT = Path(__file__).resolve().parents[1]


def frames(source: str, n: int) -> np.ndarray:
    from wmeval.tables import decode_frames, tensor_numpy

    path = ROOT / "data" / "rollouts" / "blobs" / f"{source}.parquet"
    if not path.is_file():
        raise SystemExit(f"{path}: missing; run `dvc repro` first")
    t = pq.read_table(path, columns=["frame"]).slice(0, n)
    return decode_frames(tensor_numpy(t, "frame"))


def fd(a: np.ndarray, b: np.ndarray) -> float:
    from wmeval.metrics.frechet import frechet_distance, gaussian_stats

    sa, sb = gaussian_stats(a), gaussian_stats(b)
    return frechet_distance(sa.mu, sa.sigma, sb.mu, sb.sigma)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--inception-images", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "encoder_precision.json")
    args = ap.parse_args()

    from wmeval.core.config import EncoderConfig
    from wmeval.core.digest import file_sha256
    from wmeval.encoders.zoo import build_encoder, cpu_has_bf16, fid_architecture

    device = "cuda" if torch.cuda.is_available() else "cpu"
    precisions = ["fp32", "bf16"] + (["tf32"] if device == "cuda" else [])
    tmp = Path(tempfile.mkdtemp())
    torch.manual_seed(0)
    ckpt = tmp / "pt_inception-2015-12-05-6726825d.pth"
    torch.save(fid_architecture().state_dict(), ckpt)
    specs = {
        "random_conv": (lambda p: EncoderConfig("random_conv", "random_conv", False, {}, device, 256, None, None, p),
                        args.images),
        "inception_fid (random weights)": (
            lambda p: EncoderConfig("inception_fid", "inception_fid", True, {"weights_sha256": file_sha256(ckpt)},
                                    device, 16, str(tmp), None, p), args.inception_images),
    }
    results = {}
    for label, (cfg, n) in specs.items():
        a, b = frames("ground_truth", n), frames("reversed", n)
        encoders = {p: build_encoder(cfg(p)) for p in precisions}
        for e in encoders.values():
            e(a[:2])                                                   # warm-up
        times = {p: [] for p in precisions}
        emb = {}
        for _ in range(args.repeats):                                  # interleaved: noise hits every precision
            for p, e in encoders.items():
                t0 = time.perf_counter()
                emb[p] = (e(a), e(b))
                times[p].append(time.perf_counter() - t0)
        ref_a, ref_b = emb["fp32"]
        fd_ref = fd(ref_a, ref_b)
        meaningful = abs(fd_ref) > 1e-8
        rows = {}
        for p in precisions:
            ea, eb = emb[p]
            rel = np.linalg.norm(ea - ref_a, axis=1) / np.linalg.norm(ref_a, axis=1)
            value = fd(ea, eb)
            rows[p] = {"images_per_s": round(2 * n / statistics.median(times[p]), 2),
                       "speedup_vs_fp32": round(statistics.median(times["fp32"]) / statistics.median(times[p]), 3),
                       "embedding_rel_error_max": float(rel.max()), "embedding_rel_error_median": float(np.median(rel)),
                       "fd": fd_ref if p == "fp32" else value,
                       "fd_rel_change": (None if not meaningful else 0.0 if p == "fp32" else
                                         abs(value - fd_ref) / abs(fd_ref))}
        results[label] = {"images_per_set": n, "dim": int(ref_a.shape[1]), "precisions": rows,
                          **({} if meaningful else {"fd_note": f"FD between the two sets is {fd_ref:.1e} on these "
                                                    "features (random weights barely separate the sets): its "
                                                    "relative change is not meaningful"})}
        for p, r in rows.items():
            print(f"{label:32s} {p}: {r['images_per_s']:8.1f} images/s (x{r['speedup_vs_fp32']:.2f}), embedding "
                  f"error max {r['embedding_rel_error_max']:.2e} median {r['embedding_rel_error_median']:.2e}, "
                  f"FD {r['fd']:.6g} (relative change "
                  f"{'n/a' if r['fd_rel_change'] is None else format(r['fd_rel_change'], '.2e')})")
    out = {"device": device, "cpu": platform.processor() or platform.machine(), "cpu_has_bf16": cpu_has_bf16(),
           "torch": torch.__version__, "threads": torch.get_num_threads(), "repeats": args.repeats,
           "encoders": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
