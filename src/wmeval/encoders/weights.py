"""Encoder weights: one local directory, verified by sha256 before use.

Nothing is downloaded implicitly. A stage that needs a file looks for it in the
weights directory (``encoder.weights_dir``, else ``$WMEVAL_WEIGHTS_DIR``, else
``<user cache>/wmeval/weights``), checks its sha256, and fails with a message that
names the file, the expected hash, the canonical URL and the destination path.
``wmeval weights fetch NAME`` downloads a file on a connected machine.

Where wmeval knows only the torch-hub hash prefix that the canonical file name
carries (``pt_inception-2015-12-05-6726825d.pth``: sha256 starts with ``6726825d``),
the prefix is checked; a full ``sha256`` pinned in the encoder config is checked
exactly. A file with neither pinned is refused: pin the hash you verified.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from wmeval.core.digest import file_sha256
from wmeval.core.errors import WmevalError


class WeightsError(WmevalError):
    """A weights file is missing, unpinned or does not match its hash."""


@dataclass(frozen=True)
class WeightsSpec:
    name: str
    filename: str
    url: str
    sha256: str | None
    sha256_prefix: str | None
    used_by: str


WEIGHTS: dict[str, WeightsSpec] = {w.name: w for w in (
    WeightsSpec("inception_fid", "pt_inception-2015-12-05-6726825d.pth",
                "https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/"
                "pt_inception-2015-12-05-6726825d.pth", None, "6726825d",
                "encoder inception_fid: FID Inception-v3 (pytorch-fid architecture), pool3 2048-d"),
    WeightsSpec("i3d", "i3d_torchscript.pt", "https://www.dropbox.com/s/ge9e5ujwgetktms/i3d_torchscript.pt?dl=1",
                None, None, "encoder i3d: StyleGAN-V's FVD I3D (TorchScript), 400-d pre-softmax logits"),
    WeightsSpec("lpips_alex", "alexnet-owt-7be5be79.pth", "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth",
                None, "7be5be79", "LPIPS backbone alex (torchvision AlexNet ImageNet weights)"),
    WeightsSpec("lpips_vgg", "vgg16-397923af.pth", "https://download.pytorch.org/models/vgg16-397923af.pth",
                None, "397923af", "LPIPS backbone vgg (torchvision VGG16 ImageNet weights)"),
)}


def weights_dir(configured: str | None = None) -> Path:
    """The weights directory: the config value, ``$WMEVAL_WEIGHTS_DIR``, or the user cache.

    A path that exists but is not a folder is an error naming where it came from (reporting the
    weights as "missing" would send the user looking in the wrong place).
    """
    env = os.environ.get("WMEVAL_WEIGHTS_DIR")
    if configured:
        d, origin = Path(configured).expanduser(), "encoder.weights_dir"
    elif env:
        d, origin = Path(env).expanduser(), "$WMEVAL_WEIGHTS_DIR"
    else:
        from platformdirs import user_cache_dir

        d, origin = Path(user_cache_dir("wmeval")) / "weights", "the default weights folder"
    if d.exists() and not d.is_dir():
        raise WmevalError(f"{d}: {origin} names a file, not a folder of weights files")
    return d


def spec_for(name: str, filename: str | None = None, sha256: str | None = None) -> WeightsSpec:
    """The registered spec, with an optional config override of file name and pinned sha256."""
    if name not in WEIGHTS:
        raise WeightsError(f"no weights are registered under {name!r}; known: {sorted(WEIGHTS)}")
    base = WEIGHTS[name]
    if filename is None and sha256 is None:
        return base
    return WeightsSpec(base.name, filename or base.filename, base.url, sha256 or base.sha256,
                       None if sha256 else base.sha256_prefix, base.used_by)


def status(spec: WeightsSpec, directory: Path) -> tuple[Path, str | None, str]:
    """``(path, actual sha256 or None, verdict)``; verdict is ok, missing, mismatch or unpinned."""
    path = directory / spec.filename
    if not path.is_file():
        return path, None, "missing"
    actual = file_sha256(path)
    if spec.sha256:
        return path, actual, "ok" if actual == spec.sha256 else "mismatch"
    if spec.sha256_prefix:
        return path, actual, "ok" if actual.startswith(spec.sha256_prefix) else "mismatch"
    return path, actual, "unpinned"


def expected(spec: WeightsSpec) -> str:
    if spec.sha256:
        return spec.sha256
    if spec.sha256_prefix:
        return f"{spec.sha256_prefix}... (prefix from the canonical file name)"
    return "not pinned"


def require(spec: WeightsSpec, directory: Path) -> tuple[Path, str]:
    """The verified file and its sha256, or :class:`WeightsError` saying exactly what to do."""
    path, actual, verdict = status(spec, directory)
    where = (f"file {spec.filename} for {spec.used_by}; expected sha256 {expected(spec)}; "
             f"canonical URL {spec.url}; destination {path}")
    if verdict == "missing":
        raise WeightsError(f"missing weights: {where}. Run `wmeval weights fetch {spec.name}` on a connected "
                           f"machine, or copy the file there (set $WMEVAL_WEIGHTS_DIR or encoder.weights_dir "
                           f"to use another directory)")
    if verdict == "mismatch":
        raise WeightsError(f"sha256 mismatch: {path} has sha256 {actual}, {where}. The file is not the one "
                           "this encoder is defined with; replace it")
    if verdict == "unpinned":
        raise WeightsError(f"unpinned weights: {where}; the file present has sha256 {actual}. After checking "
                           f"its provenance, pin it: `encoder.params.weights_sha256: {actual}`")
    return path, actual


def fetch(spec: WeightsSpec, directory: Path, timeout: float = 30.0) -> Path:
    """Download ``spec`` into ``directory`` (temp file, verify, rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    dest = directory / spec.filename
    fd, tmp = tempfile.mkstemp(prefix=f".{spec.filename}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(spec.url, timeout=timeout) as resp:
            shutil.copyfileobj(resp, out)
        actual = file_sha256(tmp)
        ok = (actual == spec.sha256) if spec.sha256 else actual.startswith(spec.sha256_prefix or "")
        if not ok:
            raise WeightsError(f"downloaded {spec.url} has sha256 {actual}, expected {expected(spec)}; not saved")
        os.replace(tmp, dest)
        return dest
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        raise WeightsError(f"cannot download {spec.url} ({e}); this machine may have no network. Download it "
                           f"on a connected machine and copy it to {dest}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
