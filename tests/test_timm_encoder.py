"""timm:<model> encoders and declared timm configurations: loading from a folder, a hand-made Hub cache, an
architecture plus a checkpoint and a plugin's entry point; embeddings equal to timm's own; enrolment, the gate and
calibration through BioMemory; typed refusals.

No fine-tuned biometric timm model is at hand offline, so the weights are made here: timm's tiny `test_vit`
with seeded random weights, saved by timm's own save_for_hf. Random weights do not tell people apart (two
different synthetic palms score 0.59-0.9997), so the gate test probes with the enrolled captures themselves.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import timm
import torch
from PIL import Image
from timm.models import save_for_hf

import modalities
from biomem import BioMemory
from biomem.identity.calibrate import calibrate_folder
from biomem.server import create_app, served
from modalities.errors import (
    InvalidImageError,
    InvalidInputError,
    ModelUnavailableError,
    NoFaceError,
    NoPalmError,
    UnknownEncoderError,
)
from modalities.palmsynth import palm_capture
from modalities.timm_encoder import TimmEncoder, declare_timm

ARCH = "test_vit"  # 0.3 M parameters, 160x160 input, 64-d pooled features
DIM = 64
REPO = "bm-test/palmnet"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 'fine-tuned' model (seeded random weights, a 5-class head) saved as timm saves it for the Hub."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("timm") / "palmnet"
    save_for_hf(timm.create_model(ARCH, num_classes=5), folder, safe_serialization=True)
    return folder


@pytest.fixture(scope="module")
def hub(trained, tmp_path_factory) -> Path:
    """A Hugging Face cache holding the model as hf_hub_download leaves it, with pytorch_model.bin weights."""
    cache = tmp_path_factory.mktemp("hub")
    repo = cache / f"models--{REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    shutil.copy(trained / "config.json", snapshot / "config.json")
    model = timm.create_model(f"local-dir:{trained}", pretrained=True)
    torch.save(model.state_dict(), snapshot / "pytorch_model.bin")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return cache


@pytest.fixture
def offline_hub(hub, monkeypatch) -> Path:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    return hub


@pytest.fixture(scope="module")
def encoder(trained) -> TimmEncoder:
    return modalities.create(f"timm:local-dir:{trained}")


@pytest.fixture(scope="module")
def palm() -> np.ndarray:
    return palm_capture(3, 1)


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(modalities, "_registered", dict(modalities._registered))


def timms_own(source: str, image: np.ndarray, **kwargs) -> np.ndarray:
    """timm's own answer: its loader (pretrained=True from `source`), its eval transform, the pooled features."""
    model = timm.create_model(source, pretrained=True, num_classes=0, **kwargs).eval()
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    with torch.no_grad():
        features = model(transform(Image.fromarray(image).convert("RGB")).unsqueeze(0))[0].numpy()
    return features / np.linalg.norm(features)


def test_local_dir_embeds_as_timm_itself_does(encoder, trained, palm):
    info = modalities.info(f"timm:local-dir:{trained}")
    assert (info.kind, info.dim, info.model, info.input_size) == ("other", DIM, ARCH, (3, 160, 160))
    assert (info.mean, info.std, info.preprocessing) == ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "resize")
    embedding = encoder.encode(palm)
    assert embedding.shape == (DIM,) and embedding.dtype == np.float32
    assert np.linalg.norm(embedding) == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(embedding, timms_own(f"local-dir:{trained}", palm), atol=1e-5)
    assert encoder.path == trained / "model.safetensors"


def test_hub_cache_offline_loads_the_bin_weights_as_timm_does(offline_hub, encoder, palm):
    name = f"timm:hf-hub:{REPO}"
    found = modalities.availability(name)
    assert found.ready and COMMIT in found.reason and found.source == f"hf-hub:{REPO}"
    from_hub = modalities.create(name)
    assert from_hub.path.name == "pytorch_model.bin" and COMMIT in str(from_hub.path)
    embedding = from_hub.encode(palm)
    np.testing.assert_allclose(embedding, encoder.encode(palm), atol=1e-6)
    np.testing.assert_allclose(embedding, timms_own(f"hf-hub:{REPO}", palm, cache_dir=offline_hub), atol=1e-5)


def test_an_architecture_takes_a_checkpoint_file_plain_or_as_training_saves_it(encoder, trained, palm, tmp_path):
    from_file = modalities.create(f"timm:{ARCH}", weights=str(trained / "model.safetensors"))
    np.testing.assert_allclose(from_file.encode(palm), encoder.encode(palm), atol=1e-6)
    training = tmp_path / "checkpoint-12.pth.tar"  # timm's train.py: {"epoch": ..., "state_dict": ...}
    torch.save({"epoch": 12, "state_dict": from_file.model.state_dict() | {"head.weight": torch.zeros(7, DIM),
                                                                           "head.bias": torch.zeros(7)}}, training)
    np.testing.assert_allclose(modalities.create(f"timm:{ARCH}", weights=str(training)).encode(palm),
                               encoder.encode(palm), atol=1e-6)


def test_missing_weights_offline_are_a_typed_error_with_a_hint(offline_hub, trained, tmp_path):
    name = "timm:hf-hub:bm-test/absent"
    with pytest.raises(ModelUnavailableError, match=r"config\.json.*bm-test/absent.*HF_HUB_OFFLINE.*local-dir:"):
        modalities.create(name)
    with pytest.raises(ModelUnavailableError):
        modalities.info(name)
    found = modalities.availability(name)
    assert not found.ready and "HF_HUB_OFFLINE" in found.reason
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    shutil.copy(trained / "config.json", config_only / "config.json")
    assert modalities.info(f"timm:local-dir:{config_only}").dim == DIM  # metadata needs no weights
    assert not modalities.availability(f"timm:local-dir:{config_only}").ready
    with pytest.raises(ModelUnavailableError, match="model.safetensors"):
        modalities.create(f"timm:local-dir:{config_only}")


def test_bad_models_configs_checkpoints_and_probes_are_refused(encoder, trained, tmp_path):
    with pytest.raises(UnknownEncoderError, match="no_such_net"):
        modalities.create("timm:no_such_net")
    not_timm = tmp_path / "bert"
    not_timm.mkdir()
    (not_timm / "config.json").write_text('{"architectures": ["BertModel"], "model_type": "bert"}')
    with pytest.raises(ModelUnavailableError, match="not timm's config.json.*transformers"):
        modalities.create(f"timm:local-dir:{not_timm}")
    (not_timm / "config.json").write_text('{"architecture": "resnet_from_the_future", "num_features": 8}')
    torch.save({}, not_timm / "pytorch_model.bin")
    with pytest.raises(ModelUnavailableError, match="resnet_from_the_future.*upgrade timm"):
        modalities.create(f"timm:local-dir:{not_timm}")
    other_net = tmp_path / "other"  # test_vit's config with test_resnet's weights
    other_net.mkdir()
    shutil.copy(trained / "config.json", other_net / "config.json")
    torch.save(timm.create_model("test_resnet", num_classes=5).state_dict(), other_net / "pytorch_model.bin")
    with pytest.raises(ModelUnavailableError, match="does not fit timm's test_vit"):
        modalities.create(f"timm:local-dir:{other_net}")
    with pytest.raises(InvalidImageError):
        encoder.encode(b"not an image")
    with pytest.raises(InvalidInputError, match="kind"):
        declare_timm("palm-x", f"local-dir:{trained}", kind="ear-lobe")


class Payload:
    """An object a pickle would rebuild: torch.load(weights_only=True) must refuse it."""


def test_a_checkpoint_that_needs_unpickling_code_is_refused(trained, tmp_path):
    unsafe = tmp_path / "unsafe.pth"
    torch.save({"state_dict": {}, "payload": Payload()}, unsafe)
    with pytest.raises(ModelUnavailableError, match="weights_only"):
        modalities.create(f"timm:{ARCH}", weights=str(unsafe))


def test_palm_configuration_enrols_gates_and_reopens_through_biomemory(trained, tmp_path, clean_registry,
                                                                      text_encoder):
    modalities.register(declare_timm("palm-timm-test", f"local-dir:{trained}", kind="palm"))
    captures = {"alice": palm_capture(1, 0), "bob": palm_capture(2, 0), "stranger": palm_capture(3, 0)}
    mem = BioMemory(tmp_path / "m.db", encoder="palm-timm-test", text_model=text_encoder)
    mem.set_threshold(0.99999)  # random weights: only a capture's own template scores above this
    mem.set_margin(0.0)
    alice = mem.enroll("alice", [captures["alice"]])
    bob = mem.enroll("bob", [captures["bob"]])
    mem.add("My PIN is 1234", identity=alice.id)
    assert mem.identify(captures["alice"]).admitted == [alice.id]
    assert mem.identify({"palm-timm-test": captures["bob"]}).admitted == [bob.id]
    assert mem.identify(captures["stranger"]).admitted == []
    assert [note.content for note, _ in mem.search("PIN", probe=captures["alice"]).notes] == ["My PIN is 1234"]
    assert mem.search("PIN", probe=captures["bob"]).notes == []
    with pytest.raises(NoPalmError):
        mem.identify(np.full((160, 160, 3), 128, np.uint8))
    mem.close()
    reopened = BioMemory(tmp_path / "m.db", text_model=text_encoder)  # the registry recreates the encoder
    assert reopened.modality == "palm-timm-test" and reopened.encoder().info.kind == "palm"
    assert reopened.identify(captures["alice"]).admitted == [alice.id]
    reopened.close()


def test_rest_takes_a_timm_modality_and_refuses_one_the_store_never_enrolled(trained, tmp_path, clean_registry,
                                                                            text_encoder):
    modalities.register(declare_timm("palm-timm-test", f"local-dir:{trained}", kind="palm"))
    mem = BioMemory(tmp_path / "r.db", encoder="palm-timm-test", text_model=text_encoder, limits="off")
    mem.set_threshold(0.99999)  # random weights: only a capture's own template scores above this
    mem.set_margin(0.0)
    alice = mem.enroll("alice", [palm_capture(1, 0)])
    mem.add("My PIN is 1234", identity=alice.id)

    def probe(image: np.ndarray, modality: str) -> dict:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG")
        return {"data": base64.b64encode(buffer.getvalue()).decode(), "mime_type": "image/png", "modality": modality}

    with served(create_app(mem, ui=False, mcp=False)) as url:
        found = httpx.post(f"{url}/v1/search", json={"query": "PIN", "probe": probe(palm_capture(1, 0),
                                                                                     "palm-timm-test")})
        assert [note["content"] for note in found.json()["results"]] == ["My PIN is 1234"]
        stranger = httpx.post(f"{url}/v1/search", json={"query": "PIN", "probe": probe(palm_capture(2, 0),
                                                                                        "palm-timm-test")})
        assert stranger.status_code == 200 and stranger.json()["results"] == []
        elsewhere = httpx.post(f"{url}/v1/search", json={"query": "PIN", "probe": probe(palm_capture(1, 0),
                                                                                         "timm:hf-hub:evil/net")})
        assert elsewhere.status_code == 422 and elsewhere.json()["error"]["type"] == "ModalityMismatchError"
    assert "timm:hf-hub:evil/net" not in mem.biometrics.encoders.encoders  # refused before any encoder was made
    mem.close()


def test_a_store_remembers_a_timm_name_but_not_a_misspelt_one(trained, tmp_path, text_encoder):
    name = f"timm:local-dir:{trained}"
    BioMemory(tmp_path / "t.db", encoder=name, text_model=text_encoder).close()
    reopened = BioMemory(tmp_path / "t.db", text_model=text_encoder)
    assert reopened.modality == name and reopened.encoder().info.dim == DIM
    reopened.close()
    BioMemory(tmp_path / "typo.db", encoder=f"{name}-typo", text_model=text_encoder).close()
    typo = BioMemory(tmp_path / "typo.db", text_model=text_encoder)
    assert typo.modality != f"{name}-typo"  # used for that session only, as a misspelt registered name is
    typo.close()


def test_calibration_on_a_small_synthetic_set(encoder, tmp_path):
    # Random weights cannot tell synthetic palms' captures apart (calibration refuses them: the genuine mode
    # is not above the impostor one), so a person's captures are one palm under faint sensor noise.
    rng = np.random.default_rng(5)
    for person in range(4):
        (tmp_path / "palms" / f"id_{person}").mkdir(parents=True)
        for n in range(3):
            noisy = palm_capture(person, 0).astype(int) + rng.integers(-2, 3, (128, 128))
            Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(tmp_path / "palms" / f"id_{person}" / f"{n}.png")
    report = calibrate_folder(encoder, tmp_path / "palms")
    assert report.modality == encoder.name and report.identities == 4 and report.images == 12
    assert (report.genuine, report.impostor) == (12, 54)  # 4 x C(3,2); C(12,2) - 12
    assert report.impostor_mode < report.intersection.tau <= report.genuine_mode
    assert report.intersection.fmr == 0.0 and report.intersection.fnmr == 0.0


PLUGIN = '''
from modalities import declare_timm

PalmVein = declare_timm("palmvein-mynet", "local-dir:{folder}", kind="palm", threshold=0.7,
                        license="CC BY 4.0", description="palm-vein net fine-tuned by a third party")
'''


@pytest.fixture
def plugin(trained, tmp_path, monkeypatch):
    """A pip-installed-like distribution whose entry point names a declared timm configuration."""
    (tmp_path / "bm_timm_plugin").mkdir()
    (tmp_path / "bm_timm_plugin" / "__init__.py").write_text(PLUGIN.format(folder=trained))
    dist_info = tmp_path / "bm_timm_plugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: bm_timm_plugin\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{modalities.ENTRY_POINT_GROUP}]\npalmvein-mynet = bm_timm_plugin:PalmVein\n")
    monkeypatch.syspath_prepend(tmp_path)
    yield tmp_path
    sys.modules.pop("bm_timm_plugin", None)


def test_a_plugin_declares_a_named_timm_configuration_through_its_entry_point(plugin, encoder, palm):
    assert "palmvein-mynet" in modalities.names()
    assert modalities.availability("palmvein-mynet").ready
    assert "palmvein-mynet" in [a.name for a in modalities.availability_all() if a.ready]
    info = modalities.info("palmvein-mynet")
    assert (info.kind, info.dim, info.default_threshold, info.license) == ("palm", DIM, 0.7, "CC BY 4.0")
    created = modalities.create("palmvein-mynet")
    assert created.name == "palmvein-mynet"
    np.testing.assert_allclose(created.encode(palm), encoder.encode(palm), atol=1e-6)


def test_a_plugin_whose_weights_are_gone_is_listed_not_ready(plugin, trained, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(trained, moved)
    (plugin / "bm_timm_plugin" / "__init__.py").write_text(PLUGIN.format(folder=tmp_path / "nowhere"))
    found = {a.name: a for a in modalities.availability_all()}
    assert not found["palmvein-mynet"].ready and "not found" in found["palmvein-mynet"].reason


def test_face_configuration_embeds_the_detectors_aligned_crop(trained, faces, face_encoder):
    face_net = declare_timm("face-timm-test", f"local-dir:{trained}", kind="face")()
    assert face_net.info.preprocessing == "face-align"
    crop, _ = face_encoder.aligned(faces[0])  # the default face encoder's SCRFD + 5-point alignment, 112x112 RGB
    model = timm.create_model(f"local-dir:{trained}", pretrained=True, num_classes=0).eval()
    transform = timm.data.create_transform(**{**timm.data.resolve_data_config({}, model=model), "crop_pct": 1.0})
    with torch.no_grad():
        expected = model(transform(Image.fromarray(crop)).unsqueeze(0))[0].numpy()
    np.testing.assert_allclose(face_net.encode(faces[0]), expected / np.linalg.norm(expected), atol=1e-5)
    with pytest.raises(NoFaceError):
        face_net.encode(palm_capture(1, 0))


def test_listing_and_availability_import_neither_torch_nor_timm(trained):
    script = (
        "import sys, modalities\n"
        f"modalities.register(modalities.declare_timm('palm-x', 'local-dir:{trained}', kind='palm'))\n"
        "assert modalities.availability('palm-x').ready\n"
        f"assert modalities.availability('timm:local-dir:{trained}').ready\n"
        f"assert modalities.info('timm:local-dir:{trained}').dim == {DIM}\n"
        "assert 'palm-x' in [a.name for a in modalities.availability_all() if a.ready]\n"
        "assert 'torch' not in sys.modules and 'timm' not in sys.modules, 'a look-up imported torch or timm'\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
