"""LPIPS through the ``lpips`` package, with its backbone read from verified local weights.

``lpips.LPIPS`` ships its calibrated linear layers (version 0.1) inside the package
and would download the ImageNet backbone from torchvision; here the backbone is
built randomly (``pnet_rand=True``) and then loaded from the torchvision weights
file in the weights directory (``alexnet-owt-7be5be79.pth``, ``vgg16-397923af.pth``),
sha256-checked first.
"""

from __future__ import annotations

from typing import Any, Literal

from wmeval.encoders.weights import require, spec_for, weights_dir

LPIPS_VERSION = "0.1"


def load_lpips(net: Literal["alex", "vgg"] = "alex", *, directory: str | None = None,
               weights_file: str | None = None, weights_sha256: str | None = None) -> tuple[Any, dict[str, Any]]:
    """An ``lpips.LPIPS`` module in eval mode and its protocol record.

    Raises:
        WeightsError: the backbone file is missing or does not match its hash.
    """
    import lpips
    import torch
    import torchvision

    if net not in ("alex", "vgg"):
        raise ValueError(f"LPIPS backbone must be 'alex' or 'vgg', got {net!r}")
    spec = spec_for(f"lpips_{net}", weights_file, weights_sha256)
    path, sha = require(spec, weights_dir(directory))
    backbone = (torchvision.models.alexnet if net == "alex" else torchvision.models.vgg16)(weights=None)
    backbone.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    model = lpips.LPIPS(net=net, version=LPIPS_VERSION, pretrained=True, pnet_rand=True, verbose=False)
    # lpips keeps torchvision's feature layers in slices named by their index in `features`.
    for name, sl in model.net.named_children():
        if name.startswith("slice"):
            for idx, layer in sl.named_children():
                layer.load_state_dict(backbone.features[int(idx)].state_dict())
    model.eval()
    return model, {"metric": "lpips", "package_version": getattr(lpips, "__version__", "unknown"),
                   "lpips_version": LPIPS_VERSION, "backbone": net, "backbone_file": spec.filename,
                   "backbone_sha256": sha, "linear_layers": f"shipped with lpips (weights/v{LPIPS_VERSION}/{net}.pth)",
                   "input": "RGB in [-1, 1] (normalize=True maps [0, 1] inputs)"}
