"""Encoders, verified weights and LPIPS, through the real loading paths with checkpoints made here."""

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from wmeval.cli import main
from wmeval.core.config import EncoderConfig
from wmeval.core.digest import file_sha256
from wmeval.core.errors import ConfigError, WmevalError
from wmeval.encoders import build_encoder, fid_architecture, random_conv_net
from wmeval.encoders.lpips_backbone import load_lpips
from wmeval.encoders.weights import WeightsError, WeightsSpec, fetch


@pytest.fixture(scope="module")
def inception_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("w")
    torch.manual_seed(0)
    net = fid_architecture()
    path = d / "pt_inception-2015-12-05-6726825d.pth"
    torch.save(net.state_dict(), path)
    return d, path, net


def _cfg(kind, d, **params):
    return EncoderConfig(name=kind, kind=kind, comparable_to_published=True, params=params, device="cpu",
                         batch_size=3, weights_dir=str(d))


@pytest.mark.slow
def test_inception_registry_equals_direct_forward(inception_ckpt):
    d, path, net = inception_ckpt
    enc = build_encoder(_cfg("inception_fid", d, weights_sha256=file_sha256(path)))
    assert enc.dim == 2048 and enc.weights_sha256 == file_sha256(path)
    assert enc.protocol()["preprocessing"]["antialias"] is False
    frames = np.random.default_rng(0).random((4, 48, 48, 1), dtype=np.float32)
    got = enc(frames)
    # Direct: the same network's layers on the same preprocessed input (gray -> RGB, bilinear 299, 2x - 1).
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).repeat(1, 3, 1, 1)
    x = 2 * F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False) - 1
    layers = ["Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "maxpool1", "Conv2d_3b_1x1", "Conv2d_4a_3x3",
              "maxpool2", "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d",
              "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c", "avgpool"]
    with torch.no_grad():
        for name in layers:
            x = getattr(net, name)(x)
    np.testing.assert_allclose(got, x.flatten(1).numpy(), rtol=1e-4, atol=1e-5)


def test_missing_and_mismatched_weights_name_everything(tmp_path, inception_ckpt):
    with pytest.raises(WeightsError) as e:
        build_encoder(_cfg("inception_fid", tmp_path))
    msg = str(e.value)
    for part in ("missing weights", "pt_inception-2015-12-05-6726825d.pth", "6726825d", "https://github.com/mseitzer",
                 str(tmp_path / "pt_inception-2015-12-05-6726825d.pth"), "wmeval weights fetch inception_fid"):
        assert part in msg
    d, path, _ = inception_ckpt
    with pytest.raises(WeightsError, match=r"sha256 mismatch: .* has sha256 [0-9a-f]{64}, file pt_inception"):
        build_encoder(_cfg("inception_fid", d))   # a random checkpoint does not start with 6726825d
    with pytest.raises(WeightsError, match="sha256 mismatch"):
        build_encoder(_cfg("inception_fid", d, weights_sha256="0" * 64))


class TinyI3D(torch.nn.Module):
    """The call signature of StyleGAN-V's I3D TorchScript port, with a tiny body."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 400)

    def forward(self, x: torch.Tensor, rescale: bool = False, resize: bool = False,
                return_features: bool = False) -> torch.Tensor:
        assert x.dtype == torch.uint8 and x.shape[1] == 3 and x.shape[3] == 224
        y = x.float() / 127.5 - 1 if rescale else x.float()
        steps = self.fc(y.mean(dim=(3, 4)).transpose(1, 2))   # (B, T, 400)
        return steps.max(dim=1).values


def test_i3d_torchscript_through_the_registry(tmp_path):
    torch.manual_seed(0)
    mod = torch.jit.script(TinyI3D())
    path = tmp_path / "i3d_torchscript.pt"
    mod.save(str(path))
    with pytest.raises(WeightsError, match="unpinned weights: .* pin it: `encoder.params.weights_sha256"):
        build_encoder(_cfg("i3d", tmp_path, clip_length=4))
    enc = build_encoder(_cfg("i3d", tmp_path, clip_length=4, weights_sha256=file_sha256(path)))
    assert enc.dim == 400 and enc.clip["length"] == 4 and "logits" in enc.returns
    clips = np.random.default_rng(1).random((5, 4, 32, 32, 1), dtype=np.float32)
    got = enc(clips)
    x = torch.from_numpy(clips).reshape(20, 32, 32, 1).permute(0, 3, 1, 2).repeat(1, 3, 1, 1)
    x = F.interpolate(x, size=(224, 224), mode="bilinear", align_corners=False)
    x = torch.round(x.clamp(0, 1) * 255).to(torch.uint8).reshape(5, 4, 3, 224, 224).permute(0, 2, 1, 3, 4)
    with torch.no_grad():
        want = mod(x.contiguous(), rescale=True, resize=True, return_features=True).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_random_conv_is_seeded_and_weight_free():
    a = build_encoder(EncoderConfig("r", "random_conv", False, {"width": 8, "resolution": 32, "seed": 3}, "cpu"))
    b = build_encoder(EncoderConfig("r", "random_conv", False, {"width": 8, "resolution": 32, "seed": 3}, "cpu"))
    c = build_encoder(EncoderConfig("r", "random_conv", False, {"width": 8, "resolution": 32, "seed": 4}, "cpu"))
    x = np.random.default_rng(0).random((6, 48, 48, 1), dtype=np.float32)
    np.testing.assert_array_equal(a(x), b(x))
    assert a(x).shape == (6, 64) and not np.allclose(a(x), c(x))
    assert a.protocol()["comparable_to_published"] is False and a.weights_sha256 is None
    w1 = random_conv_net(8, 3)[0].weight
    assert float(w1.std()) == pytest.approx(np.sqrt(2 / 27), rel=0.2)


def test_bad_encoder_params():
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['sise'\] for kind 'pixel'"):
        build_encoder(EncoderConfig("p", "pixel", False, {"sise": 3}))
    with pytest.raises(ConfigError, match="not a known encoder"):
        build_encoder(EncoderConfig("p", "clip", False, {}))


def test_lpips_backbone_from_local_weights(tmp_path):
    import torchvision

    torch.manual_seed(0)
    tv = torchvision.models.alexnet(weights=None)
    path = tmp_path / "alexnet-owt-7be5be79.pth"
    torch.save(tv.state_dict(), path)
    with pytest.raises(WeightsError, match="sha256 mismatch"):
        load_lpips("alex", directory=str(tmp_path))
    model, proto = load_lpips("alex", directory=str(tmp_path), weights_sha256=file_sha256(path))
    torch.testing.assert_close(getattr(model.net.slice1, "0").weight, tv.features[0].weight)
    torch.testing.assert_close(getattr(model.net.slice5, "10").weight, tv.features[10].weight)
    assert proto["backbone_sha256"] == file_sha256(path) and proto["lpips_version"] == "0.1"
    x = torch.rand(2, 3, 64, 64) * 2 - 1
    y = torch.rand(2, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        assert float(model(x, x).abs().max()) < 1e-6
        d = model(x, y).flatten()
        torch.testing.assert_close(d, model(y, x).flatten())
    assert float(d.min()) > 0


def test_weights_cli_offline_and_fetch_failure(tmp_path, capsys):
    assert main(["weights", "list", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "pt_inception-2015-12-05-6726825d.pth" in out and "missing" in out and "i3d_torchscript.pt" in out
    # A refused connection on loopback stands in for "no network": a clear error, nothing written.
    spec = WeightsSpec("x", "x.pt", "http://127.0.0.1:9/x.pt", None, "abc", "test")
    with pytest.raises(WeightsError, match=r"cannot download http://127.0.0.1:9/x.pt .* copy it to"):
        fetch(spec, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_features_stage_without_weights_fails_cleanly(tmp_path):
    from conftest import make_project

    proj = make_project(tmp_path / "p", ["protocol=tiny", "dynamics=tiny", "encoder=inception_fid",
                                         f"encoder.weights_dir={tmp_path / 'none'}"])
    (proj / "data" / "rollouts").mkdir(parents=True)
    r = subprocess.run([sys.executable, "stages/features.py"], cwd=proj, capture_output=True, text=True)
    assert r.returncode == 2 and "missing weights" in r.stderr and "Traceback" not in r.stderr
    assert not (proj / "data" / "features").exists()


def test_embed_file_clips_and_frames(tmp_path, tiny_params, monkeypatch):
    from wmeval.features import embed_file
    from wmeval.rollouts import run_world
    from wmeval.tables import tensor_numpy, write_table

    p = tiny_params
    tables = run_world(p.worlds["blobs"], {"s": {"_target_": "wmeval.models.BlobReferenceModel", "mode": "stochastic"}},
                       p.protocol, progress=False)
    path = tmp_path / "blobs" / "s.parquet"
    path.parent.mkdir()
    write_table(tables["s"], path)
    torch.manual_seed(0)
    mod = torch.jit.script(TinyI3D())
    ckpt = tmp_path / "i3d_torchscript.pt"
    mod.save(str(ckpt))
    enc = build_encoder(_cfg("i3d", tmp_path, clip_length=3, weights_sha256=file_sha256(ckpt)))
    out, stats = embed_file(path, enc, str(tmp_path / "cache"), progress=False)
    n_seq = p.protocol.n_episodes * p.protocol.num_samples * (p.protocol.n_random_plans + 3)  # + teacher forced
    assert out.num_rows == n_seq and set(out.column("t").to_pylist()) == {1}
    assert tensor_numpy(out, "embedding").shape == (n_seq, 400)
    assert stats["rows"] == n_seq == stats["hits"] + stats["embedded"]  # identical clips are embedded once
    long = build_encoder(_cfg("i3d", tmp_path, clip_length=5, weights_sha256=file_sha256(ckpt)))
    with pytest.raises(WmevalError, match="a clip of 5 frames with stride 1 needs steps up to 5"):
        embed_file(path, long, str(tmp_path / "cache"), progress=False)
    pix = build_encoder(EncoderConfig("pixel", "pixel", False, {"resolution": 4}))
    frames_out, st = embed_file(path, pix, str(tmp_path / "cache"), progress=False)
    assert frames_out.num_rows == tables["s"].num_rows and st["rows"] == st["hits"] + st["embedded"]
    assert read_metadata_of(frames_out)["comparable_to_published"] is False
    _, again = embed_file(path, pix, str(tmp_path / "cache"), progress=False)
    assert again["embedded"] == 0
    # Frames are read in batches of at most FRAME_BATCH_BYTES (bounded memory), assembled from Arrow batches of
    # ROW_GROUP_BYTES: batches of 7 rows from Arrow batches of 3 give the same table.
    from wmeval.features import embed
    from wmeval.tables import io

    row = int(np.prod(tables["s"].column("frame").type.shape))
    monkeypatch.setattr(embed, "FRAME_BATCH_BYTES", 7 * row)
    monkeypatch.setattr(io, "ROW_GROUP_BYTES", 3 * row)
    assert [len(b) for b in embed._frame_batches(path)][:2] == [7, 7]
    batched, st = embed_file(path, pix, str(tmp_path / "cache-batched"), progress=False)
    assert st["embedded"] > 0 and tables["s"].num_rows % 7 != 0
    assert batched.equals(frames_out) and batched.schema.metadata == frames_out.schema.metadata



def test_an_edit_to_the_encoder_code_or_a_new_torch_misses_the_cache(tmp_path, tiny_params, monkeypatch):
    """DVC re-runs the features stage when an encoder's code changes; the embedding cache must not then hand it
    the embeddings the old code made (the code and the libraries' releases are in its key)."""
    import dataclasses
    import importlib.metadata
    import shutil
    from pathlib import Path

    import wmeval
    from wmeval.encoders import zoo
    from wmeval.features import embed_file
    from wmeval.features.embed import Caches
    from wmeval.rollouts import run_world
    from wmeval.tables import tensor_numpy, write_table

    tables = run_world(tiny_params.worlds["blobs"], {"s": {"_target_": "wmeval.models.BlobReferenceModel",
                                                          "mode": "stochastic"}}, tiny_params.protocol, progress=False)
    path = tmp_path / "blobs" / "s.parquet"
    path.parent.mkdir()
    write_table(tables["s"], path)
    cache = str(tmp_path / "cache")
    pix = build_encoder(EncoderConfig("pixel", "pixel", False, {"resolution": 4}))
    old, first = embed_file(path, pix, cache, progress=False)
    assert first["embedded"] > 0 and embed_file(path, pix, cache, progress=False)[1]["embedded"] == 0

    # The digest is over the files' bytes and paths: a copy of the package gives the same one; an edit, another.
    pkg = tmp_path / "pkg"
    src = Path(wmeval.__file__).parent
    shutil.copytree(src / "encoders", pkg / "encoders", ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "tables").mkdir()
    shutil.copy(src / "tables" / "io.py", pkg / "tables" / "io.py")
    assert zoo.embedding_code(pkg) == zoo.embedding_code()
    with open(pkg / "encoders" / "zoo.py", "a") as f:
        f.write("\n# an edit\n")
    edited = zoo.embedding_code(pkg)
    assert edited["sha256"] != zoo.embedding_code()["sha256"] and edited["libraries"] == zoo.embedding_code()["libraries"]
    (pkg / "tables" / "io.py").unlink()
    assert zoo.embedding_code(pkg)["sha256"] != edited["sha256"]

    # The edited encoder (its code's digest, and the output it now computes) embeds every row anew.
    monkeypatch.setattr(zoo, "embedding_code", lambda package=None: edited)
    new_pix = dataclasses.replace(pix, fn=lambda batch: pix(batch) + 1.0)
    new, st = embed_file(path, new_pix, cache, progress=False)
    assert st["embedded"] == first["embedded"]           # every distinct row (duplicates in the file hit)
    np.testing.assert_allclose(tensor_numpy(new, "embedding"), tensor_numpy(old, "embedding") + 1.0)
    monkeypatch.undo()

    # A new release of an embedding library is another key; one the encoder does not compute with is not.
    x = np.zeros((2, 4, 4, 3), np.uint8)
    key = Caches(pix, cache).get(x).key
    real = importlib.metadata.version
    for lib, changes in (("torch", True), ("pandas", False)):
        monkeypatch.setattr(importlib.metadata, "version", lambda name, lib=lib: "99.0" if name == lib else real(name))
        assert (Caches(pix, cache).get(x).key != key) is changes, lib

def read_metadata_of(table):
    import json

    return json.loads(table.schema.metadata[b"wmeval"])


@pytest.mark.slow
def test_reduced_precision_is_opt_in_recorded_and_keyed(inception_ckpt):
    """bf16 runs the network in bfloat16 (close to fp32, not equal: a bf16 mantissa holds 8 bits), the protocol
    records it, and the cache key separates it from fp32, whose key has no precision field."""
    import dataclasses

    d, path, _ = inception_ckpt
    frames = np.random.default_rng(1).random((6, 64, 64, 3), dtype=np.float32)
    for cfg in (EncoderConfig("rc", "random_conv", False, {}, "cpu", 4),
                _cfg("inception_fid", d, weights_sha256=file_sha256(path))):
        fp32, bf16 = build_encoder(cfg), build_encoder(dataclasses.replace(cfg, precision="bf16"))
        a, b = fp32(frames), bf16(frames)
        rel = np.linalg.norm(b - a, axis=1) / np.linalg.norm(a, axis=1)
        assert 1e-5 < rel.max() < 0.1, (cfg.kind, rel)                # rounded, by about bf16's precision
        assert (fp32.protocol()["precision"], bf16.protocol()["precision"]) == ("fp32", "bf16")
        assert "precision" not in fp32.cache_identity() and bf16.cache_identity()["precision"] == "bf16"
        assert fp32.cache_identity() == {k: v for k, v in bf16.cache_identity().items() if k != "precision"}


def test_precision_that_the_encoder_or_device_cannot_run_is_refused():
    with pytest.raises(ConfigError, match="the pixel encoder has no network"):
        build_encoder(EncoderConfig("px", "pixel", False, {}, "cpu", 4, precision="bf16"))
    with pytest.raises(ConfigError, match="'tf32' is a CUDA tensor-core mode, but the encoder runs on 'cpu'"):
        build_encoder(EncoderConfig("rc", "random_conv", False, {}, "cpu", 4, precision="tf32"))
    from wmeval.core.config import parse_section
    with pytest.raises(ConfigError, match="precision"):
        parse_section(EncoderConfig, {"name": "rc", "kind": "random_conv", "comparable_to_published": False,
                                      "precision": "fp16"}, "params.yaml: encoder")


def test_precision_is_checked_against_params_and_reaches_the_protocol_card():
    """Features made at bf16 are stale for an fp32 run (and back); the statistics' protocol record and the card
    carry the precision (an old features file without one reads as fp32)."""
    from pathlib import Path

    from wmeval.core.stale import StaleInputError, check_made_with, encoder_config
    from wmeval.report.cards import _encoder
    from wmeval.statistics.compute import ENCODER_KEYS

    made = encoder_config("rc", "random_conv", {}, "bf16")
    with pytest.raises(StaleInputError, match="made with encoder.precision = 'bf16', but this run's params have "
                                              "encoder.precision = 'fp32'"):
        check_made_with(Path("f.parquet"), made, encoder_config("rc", "random_conv", {}), "encoder")
    assert "precision" in ENCODER_KEYS

    class Ctx:
        enc = {"encoder": "rc", "kind": "random_conv", "precision": "bf16"}
    assert _encoder(Ctx())["precision"].startswith("bf16")
    Ctx.enc = {"encoder": "rc", "kind": "random_conv"}
    assert _encoder(Ctx())["precision"].startswith("fp32")


def test_fp32_on_cuda_turns_tf32_off_and_tf32_on_restoring_both():
    """torch lets cuDNN convolutions use TF32 by default: fp32 on CUDA switches it off inside the forward pass,
    tf32 on; both restore the global switches (checked on the flags, which need no GPU)."""
    from wmeval.encoders.zoo import precision_context

    flags = lambda: (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)   # noqa: E731
    before = flags()
    with precision_context("fp32", "cuda"):
        assert flags() == (False, False)
    assert flags() == before
    with precision_context("tf32", "cuda:0"):
        assert flags() == (True, True)
    assert flags() == before
    with precision_context("fp32", "cpu"):
        assert flags() == before


def test_pixel_area_downsample_is_torchs_bits_with_or_without_torch():
    """The pixel encoder's numpy path (a process that has not imported torch, within its budget) gives torch's
    ``interpolate(mode="area")`` bit for bit: float32 box sums in row-major order, divided by the box's height and
    then its width (one division by the area, or another order, differs in the last bit for 6 x 6 boxes)."""
    from wmeval.encoders import zoo

    rng = np.random.default_rng(0)
    for h, w, c, size in [(48, 48, 1, 8), (64, 64, 3, 8), (48, 48, 3, 16), (96, 96, 3, 8), (48, 64, 3, 8),
                          (210, 160, 3, 10), (32, 32, 1, 32), (50, 50, 3, 8), (3, 3, 1, 8), (48, 48, 3, 1),
                          (16, 16, 8, 4)]:
        frames = rng.random((17, h, w, c), dtype=np.float32)
        frames[0] = np.round(frames[0] * 255) / 255                     # uint8-valued frames too
        x = torch.from_numpy(frames).permute(0, 3, 1, 2)
        want = F.interpolate(x, size=(size, size), mode="area").permute(0, 2, 3, 1).numpy()
        if h % size == 0 and w % size == 0 and size > 1 and c < 8:          # the shapes the numpy path takes
            got = zoo._area_numpy(frames, size)
            assert got.dtype == np.float32 and np.array_equal(got, want), (h, w, c, size)
        assert np.array_equal(zoo.area_downsample(frames, size), want)     # torch is loaded here: its path
    # 6 x 6 boxes divided once by 36: not torch's bits (the test above would catch that order).
    frames = rng.random((50, 48, 48, 1), dtype=np.float32)
    boxes = frames.reshape(50, 8, 6, 8, 6, 1).transpose(2, 4, 0, 1, 3, 5)
    once = np.zeros((50, 8, 8, 1), np.float32)
    for i in range(6):
        for j in range(6):
            once += boxes[i, j]
    assert not np.array_equal(once / np.float32(36), zoo._area_numpy(frames, 8))


def test_the_pixel_encoder_stays_off_torch_within_its_budget(tmp_path):
    """A fresh process embedding a few frames with the pixel encoder never imports torch; past the budget it
    does, with the same features."""
    code = """
import sys
import numpy as np
from wmeval.core.config import EncoderConfig
from wmeval.encoders import build_encoder, zoo
enc = build_encoder(EncoderConfig("pixel", "pixel", False, {"resolution": 8}))
frames = np.random.default_rng(1).random((40, 48, 48, 3), dtype=np.float32)
a = enc.fn(frames)
print("torch" in sys.modules)
zoo.NUMPY_AREA_BUDGET = 0
b = enc.fn(frames)
print("torch" in sys.modules, np.array_equal(a, b), a.shape)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == ["False", "True True (40, 192)"], r.stdout
