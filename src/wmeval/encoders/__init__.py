"""Encoders (frames or clips to embeddings) and the weights they load.

- :mod:`.zoo`: the named encoders and their preprocessing contracts (:func:`build_encoder`);
- :mod:`.weights`: local weights files, their sha256 and the clear error when one is missing;
- :mod:`.lpips_backbone`: the LPIPS backbone (``lpips`` package) loaded from local weights.
"""

from wmeval.encoders.zoo import (
    Encoder,
    area_downsample,
    build_encoder,
    fid_architecture,
    fid_inception,
    random_conv_net,
)

__all__ = ["Encoder", "area_downsample", "build_encoder", "fid_architecture", "fid_inception", "random_conv_net"]
