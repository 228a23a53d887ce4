"""The encoder registry: named preprocessing contracts plus feature extractors.

An :class:`Encoder` maps a batch of frames ``(B, H_img, W, C)`` float32 in [0, 1]
(image encoders) or clips ``(B, T, H_img, W, C)`` (video encoders) to embeddings
``(B, dim)`` float32. Its ``protocol()`` is what every features file records.

==============  ==========================================================  =====
kind            what                                                        dim
==============  ==========================================================  =====
pixel           area downsample to size x size, flatten (weight-free)       size^2 C
random_conv     seeded, randomly initialised conv net (weight-free; random  width*8
                embeddings: Naeem et al. 2020)
inception_fid   the FID Inception-v3 of pytorch-fid, pool3 features         2048
i3d             StyleGAN-V's FVD I3D (TorchScript), pre-softmax logits      400
==============  ==========================================================  =====

Weight-free encoders are not comparable to published FID/FVD numbers; their
protocol says so. ``inception_fid`` and ``i3d`` load verified local weights
(:mod:`wmeval.encoders.weights`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wmeval.core.config import EncoderConfig
from wmeval.core.errors import ConfigError
from wmeval.encoders.weights import require, spec_for, weights_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Encoder:
    name: str
    kind: str
    dim: int | None                      # None: depends on the input's channels (pixel)
    preprocessing: dict[str, Any]
    comparable_to_published: bool
    fn: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    weights_sha256: str | None = None
    clip: dict[str, Any] | None = None   # video encoders: length, stride, frames taken
    returns: str = "features"
    device: str = "cpu"
    precision: str = "fp32"

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        return self.fn(batch)

    def protocol(self) -> dict[str, Any]:
        return {"encoder": self.name, "kind": self.kind, "dim": self.dim, "preprocessing": self.preprocessing,
                "weights_sha256": self.weights_sha256, "clip": self.clip, "returns": self.returns,
                "comparable_to_published": self.comparable_to_published, "precision": self.precision}

    def cache_identity(self) -> dict[str, Any]:
        """Everything that changes the embeddings (the cache key); not the device or batch size: the encoder's
        protocol, its precision where it is not ``fp32``, and :func:`embedding_code` (the code and the library
        releases that compute it), so that an edit to an encoder or a new torch misses the cache instead of
        serving the embeddings the old code made."""
        p = self.protocol()
        keys = ("encoder", "kind", "dim", "preprocessing", "weights_sha256", "clip", "returns")
        return ({k: p[k] for k in keys} | ({} if self.precision == "fp32" else {"precision": self.precision})
                | {"code": embedding_code()})


#: The code that turns a stored frame into an embedding, relative to the ``wmeval`` package: the encoders and the
#: frames' decoding (:func:`wmeval.tables.io.decode_frames`).
EMBEDDING_CODE = ("encoders", "tables/io.py")
#: The libraries an embedding is computed with, whose releases may change it.
EMBEDDING_LIBRARIES = ("numpy", "torch", "torchvision", "pytorch-fid")


def embedding_code(package: Path | None = None) -> dict[str, Any]:
    """``{"sha256": ..., "libraries": {name: version or None}}``: a sha256 over the ``.py`` files of
    :data:`EMBEDDING_CODE` under ``package`` (default: the imported ``wmeval``), with their paths, and the installed
    releases of :data:`EMBEDDING_LIBRARIES`. Part of the embedding cache's key: DVC re-runs the features stage
    when an encoder's code changes, and a cache keyed without it would hand that run the old embeddings. Read
    afresh on every call (no memo that could outlive an edit)."""
    from wmeval.core.pins import installed_versions

    root = Path(__file__).resolve().parents[1] if package is None else Path(package)
    files = sorted({f for rel in EMBEDDING_CODE
                    for f in ((root / rel).rglob("*.py") if (root / rel).is_dir() else [root / rel])
                    if f.is_file() and "__pycache__" not in f.parts})
    if not files:
        raise FileNotFoundError(f"embedding_code: none of {EMBEDDING_CODE} under {root}")
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return {"sha256": h.hexdigest(), "libraries": installed_versions(EMBEDDING_LIBRARIES)}


def _device(cfg: EncoderConfig) -> str:
    import torch

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("params.yaml: encoder.device = 'cuda', but no CUDA device is available")
    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.device


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX); elsewhere torch emulates it."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def precision_context(precision: str, device: str):
    """A context in which a network's forward pass runs at ``precision`` (``fp32``: unchanged)."""
    import torch

    if precision == "fp32":
        # CUDA: cuDNN convolutions default to TF32 in torch; fp32 means fp32 (off inside the context).
        return _cuda_tf32(False) if device.startswith("cuda") else contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    if precision == "tf32":
        return _cuda_tf32(True)
    raise ConfigError(f"params.yaml: encoder.precision = {precision!r}; choose fp32, bf16 or tf32")


@contextlib.contextmanager
def _cuda_tf32(allow: bool):
    """TF32 matmuls and convolutions on (``tf32``) or off (``fp32``) inside the context, restored after."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _precision(cfg: EncoderConfig, device: str) -> str:
    """The encoder's precision, checked against its device."""
    if cfg.precision == "tf32" and not device.startswith("cuda"):
        raise ConfigError(f"params.yaml: encoder.precision = 'tf32' is a CUDA tensor-core mode, but the encoder runs "
                          f"on {device!r}; use bf16 on a CPU")
    if cfg.precision == "bf16" and device == "cpu" and not cpu_has_bf16():
        log.warning("encoder %r: bf16 on a CPU without AVX512-BF16/AMX is emulated and usually slower than fp32 "
                    "(benchmarks/encoder_precision.py measures it)", cfg.name)
    return cfg.precision


def _params(cfg: EncoderConfig, allowed: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(cfg.params) - set(allowed))
    if unknown:
        raise ConfigError(f"params.yaml: encoder.params: unknown key(s) {unknown} for kind {cfg.kind!r}; "
                          f"allowed: {sorted(allowed)}")
    return {**allowed, **cfg.params}


def _to_rgb_nchw(frames: np.ndarray, device: str):
    """``(B, H, W, C)`` float in [0, 1] to a ``(B, 3, H, W)`` tensor; grayscale is repeated to RGB."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.float32)).to(device).permute(0, 3, 1, 2)
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    elif x.shape[1] != 3:
        raise ValueError(f"frames must have 1 or 3 channels, got {x.shape[1]}")
    return x.contiguous(memory_format=torch.channels_last)


def _torch_fn(net, prep: Callable, device: str, batch_size: int,
              precision: str = "fp32") -> Callable[[np.ndarray], np.ndarray]:
    import torch

    if isinstance(net, torch.nn.Module):
        net = net.to(device, memory_format=torch.channels_last)
    else:
        net = net.to(device)
    net = net.eval()

    def fn(batch: np.ndarray) -> np.ndarray:
        out = []
        with torch.inference_mode(), precision_context(precision, device):
            for i in range(0, len(batch), batch_size):
                out.append(net(prep(batch[i:i + batch_size])).float().cpu().numpy())
        return np.concatenate(out) if out else np.empty((0, 0), np.float32)

    return fn


#: Frame values (elements) the pixel encoder downsamples with numpy in a process before it imports torch
#: (about 1.5 s): numpy takes 1-9 ns an element (64 x 64 RGB the slowest), torch about 1 ns.
NUMPY_AREA_BUDGET = 5e7
_numpy_area_done = 0


def area_downsample(frames: np.ndarray, size: int) -> np.ndarray:
    """Area (box) downsample ``(B, H_img, W, C)`` to ``(B, size, size, C)`` (torch ``interpolate(mode="area")``).

    Where ``size`` (above 1) divides both sides of frames of fewer than 8 channels, the first
    :data:`NUMPY_AREA_BUDGET` elements a process downsamples (a smoke test's or a small world's frames) go
    through numpy, bit for bit torch's CPU kernel (float32 sums of each box in row-major order, divided by its
    height and then its width; tested against torch): a stage that embeds a few thousand frames then never
    imports torch. Past that budget, or otherwise, torch.
    """
    global _numpy_area_done
    x = np.asarray(frames)
    h, w = x.shape[1:3]
    # Not for a 1 x 1 output (torch takes a mean over the frame there, another summation order) nor for 8 or more
    # channels (torch's vectorised lanes divide once by the box's area).
    if (1 < size <= min(h, w) and h % size == 0 and w % size == 0 and x.shape[3] < 8
            and "torch" not in sys.modules and _numpy_area_done + x.size <= NUMPY_AREA_BUDGET):
        _numpy_area_done += x.size
        return _area_numpy(x, size)
    return _area_torch(x, size)


def _area_numpy(frames: np.ndarray, size: int) -> np.ndarray:
    b, h, w, c = frames.shape
    kh, kw = h // size, w // size
    # (kh, kw, B, size, size, C): each box offset's values contiguous, summed in torch's order.
    boxes = np.ascontiguousarray(np.asarray(frames, dtype=np.float32).reshape(b, size, kh, size, kw, c)
                                 .transpose(2, 4, 0, 1, 3, 5))
    out = np.zeros((b, size, size, c), dtype=np.float32)
    for i in range(kh):
        for j in range(kw):
            out += boxes[i, j]
    out /= np.float32(kh)
    out /= np.float32(kw)
    return out


def _area_torch(frames: np.ndarray, size: int) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.float32)).permute(0, 3, 1, 2)
    with torch.inference_mode():
        y = F.interpolate(x, size=(size, size), mode="area")
    return y.permute(0, 2, 3, 1).numpy()


def random_conv_net(width: int, seed: int):
    """A small conv net with weights drawn from a seeded generator (same on every machine)."""
    import torch
    from torch import nn

    chans = [3, width, 2 * width, 4 * width, 8 * width]
    layers: list[nn.Module] = []
    for a, b in zip(chans[:-1], chans[1:]):
        layers += [nn.Conv2d(a, b, 3, stride=2, padding=1), nn.ReLU()]
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * np.sqrt(2.0 / fan_in))
                m.bias.zero_()
    return net


@contextlib.contextmanager
def _local_state_dict(module, path):
    """Make ``module.load_state_dict_from_url`` read a verified local file instead of downloading."""
    import torch

    original = module.load_state_dict_from_url
    module.load_state_dict_from_url = lambda *a, **k: torch.load(path, map_location="cpu", weights_only=True)
    try:
        yield
    finally:
        module.load_state_dict_from_url = original


def fid_architecture():
    """pytorch-fid's FID Inception built as its ``fid_inception_v3`` does, without weights.

    For making local test checkpoints and for benchmarks; pipelines use :func:`fid_inception`.
    """
    import pytorch_fid.inception as pfi

    net = pfi._inception_v3(num_classes=1008, aux_logits=False, weights=None)
    net.Mixed_5b = pfi.FIDInceptionA(192, pool_features=32)
    net.Mixed_5c = pfi.FIDInceptionA(256, pool_features=64)
    net.Mixed_5d = pfi.FIDInceptionA(288, pool_features=64)
    net.Mixed_6b = pfi.FIDInceptionC(768, channels_7x7=128)
    net.Mixed_6c = pfi.FIDInceptionC(768, channels_7x7=160)
    net.Mixed_6d = pfi.FIDInceptionC(768, channels_7x7=160)
    net.Mixed_6e = pfi.FIDInceptionC(768, channels_7x7=192)
    net.Mixed_7b = pfi.FIDInceptionE_1(1280)
    net.Mixed_7c = pfi.FIDInceptionE_2(2048)
    return net.eval()


def fid_inception(path) -> Any:
    """pytorch-fid's ``InceptionV3`` (pool3 block), its weights read from ``path``.

    pytorch-fid builds the FID Inception and loads its weights from a URL; we let it
    build the architecture and hand it the verified local file instead.
    """
    import pytorch_fid.inception as pfi

    with _local_state_dict(pfi, path):
        return pfi.InceptionV3([pfi.InceptionV3.BLOCK_INDEX_BY_DIM[2048]], resize_input=True, normalize_input=True)


def fold_batchnorm(net):
    """Fold each eval-mode BatchNorm of pytorch-fid's ``BasicConv2d`` into its convolution.

    ``bn(conv(x)) = conv'(x)`` with ``w' = w * g / sqrt(v + eps)`` and
    ``b' = b_bn - m * g / sqrt(v + eps)``: the same function with one memory pass less
    per layer (about 12% faster on CPU; outputs agree to ~1e-6 relative).
    """
    import torch

    with torch.no_grad():
        for mod in net.modules():
            if type(mod).__name__ == "BasicConv2d" and isinstance(mod.bn, torch.nn.BatchNorm2d):
                conv, bn = mod.conv, mod.bn
                scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
                conv.weight.mul_(scale[:, None, None, None])
                conv.bias = torch.nn.Parameter(bn.bias - bn.running_mean * scale)
                mod.bn = torch.nn.Identity()
    return net


class _FidPool3:
    """Callable wrapper: pytorch-fid returns a list of feature maps; take pool3 and flatten."""

    def __init__(self, net) -> None:
        self.net = net

    def to(self, device):
        import torch

        self.net = self.net.to(device, memory_format=torch.channels_last)
        return self

    def eval(self):
        self.net.eval()
        return self

    def __call__(self, x):
        return self.net(x)[0].flatten(1)


def _pixel(cfg: EncoderConfig) -> Encoder:
    """Area-downsampled pixels, flattened: weight-free, for offline runs and tests."""
    p = _params(cfg, {"resolution": 8})
    size = p["resolution"]
    if not isinstance(size, int) or size < 1:
        raise ConfigError(f"params.yaml: encoder.params.resolution = {size!r}; expected a positive integer")
    return Encoder(cfg.name, "pixel", None,
                   {"resize": "area", "size": [size, size], "antialias": "n/a (area averages)",
                    "value_range": [0.0, 1.0], "normalization": "none",
                    "grayscale_to_rgb": "no (channels kept)", "flatten": "HWC order"},
                   cfg.comparable_to_published,
                   lambda frames: area_downsample(frames, size).reshape(len(frames), -1))


def _random_conv(cfg: EncoderConfig) -> Encoder:
    """A seeded random convolutional net: weight-free features with some spatial invariance."""
    import torch.nn.functional as F

    p = _params(cfg, {"resolution": 64, "width": 32, "seed": 0})
    device = _device(cfg)
    precision = _precision(cfg, device)
    net = random_conv_net(p["width"], p["seed"])

    def prep(frames: np.ndarray):
        x = F.interpolate(_to_rgb_nchw(frames, device), size=(p["resolution"], p["resolution"]), mode="bilinear",
                          align_corners=False, antialias=False)
        return 2 * x - 1

    return Encoder(cfg.name, "random_conv", 8 * p["width"],
                   {"resize": "bilinear", "size": [p["resolution"], p["resolution"]], "antialias": False,
                    "value_range": [-1.0, 1.0], "normalization": "2x - 1",
                    "grayscale_to_rgb": "repeat channel", "init": f"seeded normal (He), seed {p['seed']}",
                    "width": p["width"]},
                   cfg.comparable_to_published, _torch_fn(net, prep, device, cfg.batch_size, precision), device=device,
                   precision=precision)


def _inception_fid(cfg: EncoderConfig) -> Encoder:
    """The FID Inception-v3 (pytorch-fid's architecture, pool3, 2048-d) from a verified weights file."""
    p = _params(cfg, {"weights_file": None, "weights_sha256": None, "fold_batchnorm": True})
    spec = spec_for("inception_fid", p["weights_file"], p["weights_sha256"])
    path, sha = require(spec, weights_dir(cfg.weights_dir))
    device = _device(cfg)
    precision = _precision(cfg, device)
    inception = fid_inception(path).eval()
    net = _FidPool3(fold_batchnorm(inception) if p["fold_batchnorm"] else inception)
    return Encoder(cfg.name, "inception_fid", 2048,
                   {"resize": "bilinear (torch interpolate, align_corners=False)", "size": [299, 299],
                    "antialias": False, "value_range": [-1.0, 1.0], "normalization": "2x - 1 (from [0, 1])",
                    "grayscale_to_rgb": "repeat channel", "architecture": "pytorch-fid InceptionV3, pool3",
                    "batchnorm_folded": bool(p["fold_batchnorm"]),
                    "weights_file": spec.filename},
                   cfg.comparable_to_published,
                   _torch_fn(net, lambda f: _to_rgb_nchw(f, device), device, cfg.batch_size, precision),
                   weights_sha256=sha, device=device, precision=precision)


def _i3d(cfg: EncoderConfig) -> Encoder:
    """The FVD I3D (TorchScript, 400-d logits on 16-frame clips) from a verified weights file."""
    import torch

    p = _params(cfg, {"weights_file": None, "weights_sha256": None, "clip_length": 16, "frame_stride": 1,
                      "resolution": 224})
    spec = spec_for("i3d", p["weights_file"], p["weights_sha256"])
    path, sha = require(spec, weights_dir(cfg.weights_dir))
    device = _device(cfg)
    precision = _precision(cfg, device)
    net = torch.jit.load(str(path), map_location=device).eval()
    size = p["resolution"]

    def fn(clips: np.ndarray) -> np.ndarray:
        import torch.nn.functional as F

        out = []
        with torch.inference_mode(), precision_context(precision, device):
            for i in range(0, len(clips), cfg.batch_size):
                c = clips[i:i + cfg.batch_size]                       # (B, T, H, W, C) in [0, 1]
                b, t = c.shape[:2]
                x = _to_rgb_nchw(c.reshape(b * t, *c.shape[2:]), device)
                x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=False)
                x = torch.round(x.clamp(0, 1) * 255).to(torch.uint8)
                x = x.reshape(b, t, 3, size, size).permute(0, 2, 1, 3, 4).contiguous()  # (B, C, T, H, W)
                out.append(net(x, rescale=True, resize=True, return_features=True).float().cpu().numpy())
        return np.concatenate(out) if out else np.empty((0, 400), np.float32)

    return Encoder(cfg.name, "i3d", 400,
                   {"resize": "bilinear", "size": [size, size], "antialias": False,
                    "value_range": "uint8 [0, 255] (the detector rescales to [-1, 1])",
                    "grayscale_to_rgb": "repeat channel", "layout": "[B, C, T, H, W]",
                    "detector_kwargs": {"rescale": True, "resize": True, "return_features": True},
                    "weights_file": spec.filename},
                   cfg.comparable_to_published, fn, weights_sha256=sha,
                   clip={"length": p["clip_length"], "frame_stride": p["frame_stride"],
                         "clips": "one per sequence, from step 1"},
                   returns="400-d pre-softmax logits (Kinetics-400), as StyleGAN-V's FVD", device=device,
                   precision=precision)


#: Encoder kinds (``encoder.kind``) and their builders.
ENCODER_KINDS = {"pixel": _pixel, "random_conv": _random_conv, "inception_fid": _inception_fid, "i3d": _i3d}


def build_encoder(cfg: EncoderConfig) -> Encoder:
    """Build the encoder named by the ``encoder`` config section (weights verified here)."""
    if cfg.kind not in ENCODER_KINDS:
        raise ConfigError(f"params.yaml: encoder.kind = {cfg.kind!r} is not a known encoder; choose one of "
                          f"{list(ENCODER_KINDS)}")
    if cfg.kind == "pixel" and cfg.precision != "fp32":
        raise ConfigError(f"params.yaml: encoder.precision = {cfg.precision!r}, but the pixel encoder has no "
                          "network to run at another precision; use fp32")
    return ENCODER_KINDS[cfg.kind](cfg)
