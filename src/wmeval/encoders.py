"""Frame encoders for the distributional and feature-space metrics.

An encoder is a named preprocessing contract plus a pure function from frames
``(B, H_img, W, C)`` float32 in [0, 1] to embeddings ``(B, dim)`` float32.

Weight-free encoders (this module) run offline and in tests. Their embeddings are
not comparable to published FID/FVD numbers, and their protocol says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import EncoderConfig
from .errors import ConfigError


@dataclass(frozen=True)
class Encoder:
    name: str
    kind: str
    dim_per_channel: int
    preprocessing: dict[str, Any]
    comparable_to_published: bool
    fn: Callable[[np.ndarray], np.ndarray] = field(repr=False)

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        return self.fn(frames)

    def protocol(self) -> dict[str, Any]:
        return {"encoder": self.name, "kind": self.kind, "preprocessing": self.preprocessing,
                "weights_sha256": None, "comparable_to_published": self.comparable_to_published}


def area_downsample(frames: np.ndarray, size: int) -> np.ndarray:
    """Area (box) downsample ``(B, H_img, W, C)`` to ``(B, size, size, C)``.

    Uses torch's ``interpolate(mode="area")`` (adaptive average pooling), so any
    input size works; each output pixel is the mean of the input pixels it covers.
    """
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.float32)).permute(0, 3, 1, 2)
    with torch.no_grad():
        y = F.interpolate(x, size=(size, size), mode="area")
    return y.permute(0, 2, 3, 1).numpy()


def build_encoder(cfg: EncoderConfig) -> Encoder:
    """Build the encoder named by the ``encoder`` config section."""
    if cfg.kind == "pixel":
        size = cfg.params.get("size", 8)
        unknown = set(cfg.params) - {"size"}
        if unknown:
            raise ConfigError(f"params.yaml: encoder.params: unknown key(s) {sorted(unknown)} for kind 'pixel'")
        if not isinstance(size, int) or size < 1:
            raise ConfigError(f"params.yaml: encoder.params.size = {size!r}; expected a positive integer")

        def fn(frames: np.ndarray) -> np.ndarray:
            return area_downsample(frames, size).reshape(len(frames), -1)

        return Encoder(cfg.name, "pixel", size * size,
                       {"resize": "area", "size": [size, size], "antialias": "n/a (area)",
                        "value_range": [0.0, 1.0], "normalization": "none",
                        "grayscale_to_rgb": "no (channels kept)", "flatten": "HWC order"},
                       cfg.comparable_to_published, fn)
    raise ConfigError(f"params.yaml: encoder.kind = {cfg.kind!r} is not a known encoder; choose one of ['pixel']")
