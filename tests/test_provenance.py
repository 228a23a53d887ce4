"""wmeval.lineage.provenance.run_record: git, dvc.lock hashes, params, packages, weights, seeds, hardware."""

import json
import subprocess
from pathlib import Path

import yaml

from wmeval.core.digest import file_sha256
from wmeval.lineage.provenance import PACKAGES, run_record

LOCK = {
    "schema": "2.0",
    "stages": {
        "rollouts": {"cmd": "python stages/rollouts.py",
                     "deps": [{"path": "stages/rollouts.py", "hash": "md5", "md5": "a" * 32, "size": 3}],
                     "params": {"params.yaml": {"protocol": {"seed": 7}}},
                     "outs": [{"path": "data/rollouts", "hash": "md5", "md5": "b" * 32 + ".dir", "size": 9,
                               "nfiles": 2}]},
        "bootstrap": {"cmd": "python stages/bootstrap.py",
                      "deps": [{"path": "data/rollouts", "hash": "md5", "md5": "b" * 32 + ".dir"}],
                      "outs": [{"path": "reports/metrics.json", "hash": "md5", "md5": "c" * 32}]},
    },
}
PARAMS = {"protocol": {"seed": 7}, "dynamics": {"seed": 8}, "bootstrap": {"seed": 9}, "scoring": {"seed": 10,
          "lpips": None}, "encoder": {"name": "pixel", "kind": "pixel"}}


def _project(tmp_path: Path, params=PARAMS) -> Path:
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(LOCK))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return tmp_path


def test_record_outside_git_is_json_and_complete(tmp_path):
    rec = run_record(_project(tmp_path))
    assert json.loads(json.dumps(rec)) == rec
    assert rec["git"]["commit"] is None and rec["git"]["dirty"] is None and rec["git"]["reason"]
    assert rec["dvc_lock"]["rollouts"]["deps"] == {"stages/rollouts.py": "a" * 32}
    assert rec["dvc_lock"]["rollouts"]["outs"] == {"data/rollouts": "b" * 32 + ".dir"}
    assert rec["dvc_lock"]["bootstrap"]["outs"] == {"reports/metrics.json": "c" * 32}
    assert rec["params"] == PARAMS
    assert rec["seeds"] == {"protocol.seed": 7, "dynamics.seed": 8, "bootstrap.seed": 9, "scoring.seed": 10}
    assert set(rec["packages"]) == set(PACKAGES)
    assert rec["packages"]["numpy"] == __import__("numpy").__version__
    assert rec["code"]["source_sha256"] is None and "dvc.yaml" in rec["code"]["reason"]   # no DVC project
    assert rec["weights"]["encoder"]["sha256"] is None and "weight-free" in rec["weights"]["encoder"]["reason"]
    assert rec["weights"]["lpips"]["sha256"] is None and "scoring.lpips" in rec["weights"]["lpips"]["reason"]
    hw = rec["hardware"]
    assert hw["cores"] >= 1 and hw["memory_bytes"] > 0 and hw["cpu"]
    det = rec["determinism"]
    assert set(det["env"]) >= {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}


def test_torch_fields_come_from_a_loaded_torch_only(monkeypatch):
    """The report stage computes nothing with torch: its record neither imports torch (about 2 s) nor reports
    torch's defaults as if they had produced a number; a process that loaded torch records its settings."""
    import sys

    import torch

    from wmeval.lineage.provenance import TORCH_NOT_LOADED, determinism

    det = determinism()
    assert isinstance(det["torch_deterministic_algorithms"], bool) and det["torch_num_threads"] == torch.get_num_threads()
    assert "torch_reason" not in det
    monkeypatch.delitem(sys.modules, "torch")
    det = determinism()
    assert det["torch_deterministic_algorithms"] is None and det["torch_num_threads"] is None
    assert det["torch_reason"] == TORCH_NOT_LOADED
    assert "torch" not in sys.modules            # determinism() and hardware() did not import it
    from wmeval.lineage.provenance import hardware

    hardware()
    assert "torch" not in sys.modules


def test_params_argument_wins_and_missing_lock_is_none(tmp_path):
    rec = run_record(tmp_path, params={"protocol": {"seed": 3}})
    assert rec["dvc_lock"] is None
    assert rec["params"] == {"protocol": {"seed": 3}}
    assert rec["seeds"]["protocol.seed"] == 3 and rec["seeds"]["bootstrap.seed"] is None


def test_missing_package_is_none(monkeypatch, tmp_path):
    monkeypatch.setattr("wmeval.lineage.provenance.PACKAGES", ("numpy", "surely-not-installed-pkg"))
    rec = run_record(tmp_path)
    assert rec["packages"] == {"numpy": __import__("numpy").__version__, "surely-not-installed-pkg": None}


def test_git_commit_and_dirty_flag(tmp_path):
    root = _project(tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=root, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    rec = run_record(root)
    assert rec["git"] == {"commit": head, "dirty": False, "changed_files": []}
    (root / "params.yaml").write_text("protocol: {seed: 1}\n")
    rec = run_record(root)
    assert rec["git"]["dirty"] is True and rec["git"]["changed_files"] == ["params.yaml"]


def test_weighted_encoder_hash_from_weights_dir_and_missing(tmp_path):
    wdir = tmp_path / "w"
    wdir.mkdir()
    params = {**PARAMS, "encoder": {"name": "inception_fid", "kind": "inception_fid", "params": {},
                                    "weights_dir": str(wdir)},
              "scoring": {"seed": 0, "lpips": "alex"}}
    rec = run_record(_project(tmp_path, params))
    enc = rec["weights"]["encoder"]
    assert enc["sha256"] is None and "missing" in enc["reason"] and "pt_inception" in enc["reason"]
    f = wdir / "pt_inception-2015-12-05-6726825d.pth"
    f.write_bytes(b"not the real weights")
    enc = run_record(tmp_path)["weights"]["encoder"]
    assert enc["sha256"] == file_sha256(f) and enc["verdict"] == "mismatch"
    assert run_record(tmp_path)["weights"]["lpips"]["backbone"] == "alex"


def test_weighted_encoder_hash_prefers_features_metadata(tmp_path):
    import pyarrow as pa

    from wmeval.tables import with_metadata, write_table

    params = {**PARAMS, "encoder": {"name": "inception_fid", "kind": "inception_fid", "params": {}}}
    d = tmp_path / "data" / "features" / "inception_fid" / "blobs"
    d.mkdir(parents=True)
    write_table(with_metadata(pa.table({"x": [1]}), {"weights_sha256": "f" * 64}), d / "mean.parquet")
    enc = run_record(_project(tmp_path, params))["weights"]["encoder"]
    assert enc["sha256"] == "f" * 64 and "blobs/mean.parquet" in enc["source"]


def test_bad_lock_raises(tmp_path):
    import pytest

    from wmeval.core.errors import WmevalError

    (tmp_path / "dvc.lock").write_text("stages: [1, 2\n")
    with pytest.raises(WmevalError, match="dvc.lock"):
        run_record(tmp_path)


def test_gpu_name_when_cuda_is_available(monkeypatch):
    import torch

    from wmeval.lineage.provenance import hardware

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake GPU 80GB")
    assert hardware()["gpu"] == "Fake GPU 80GB"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hardware()["gpu"] is None


def test_gpu_name_from_the_driver_without_torch(monkeypatch, tmp_path):
    import sys

    from wmeval.lineage import provenance

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    (tmp_path / "0000:c1:00.0").mkdir()
    (tmp_path / "0000:c1:00.0" / "information").write_text(
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nBus Type: \t PCIe\n")
    monkeypatch.setattr(provenance, "NVIDIA_GPUS", tmp_path)
    assert provenance.hardware()["gpu"] == "NVIDIA H100 80GB HBM3"
    monkeypatch.setattr(provenance, "NVIDIA_GPUS", tmp_path / "absent")
    assert provenance.hardware()["gpu"] is None
    assert "torch" not in sys.modules
