"""palm-ccnet: the official CCNet architecture, checkpoint loading from every source, refusals.

No CCNet weights ship with the project, so a seeded random model stands in for the authors'
checkpoint: what is tested is that whatever the authors saved loads key for key and encodes
exactly as the in-memory model does.
"""

import threading

import numpy as np
import pytest
import torch

import modalities
from biomem.errors import ModelUnavailableError, NoPalmError
from modalities import l2_normalise
from modalities.ccnet import EMBEDDING_DIM, CCNetEncoder, checkpoint_path
from modalities.ccnet_net import ccnet, roi_tensor
from modalities.palm import palm_roi

NUM_CLASSES = 10  # any head size: the encoder reads it from the checkpoint
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def model() -> ccnet:
    torch.manual_seed(0)
    return ccnet(NUM_CLASSES, EMBEDDING_DIM).eval()


@pytest.fixture(scope="module")
def checkpoint(model, tmp_path_factory):
    """The model saved as the authors' train.py saves it: torch.save(net.state_dict(), ...)."""
    path = tmp_path_factory.mktemp("ckpt") / "net_params_best.pth"
    torch.save(model.state_dict(), path)
    yield path
    path.unlink()  # 250 MB: do not leave it in pytest's kept temp folders


@pytest.fixture(scope="module")
def encoder(checkpoint) -> CCNetEncoder:
    return CCNetEncoder(weights=str(checkpoint))


@pytest.fixture(scope="module")
def roi() -> np.ndarray:
    """A textured 128x128 grayscale stand-in for a palm ROI, with a black border like real crops."""
    image = np.random.default_rng(7).integers(20, 236, (128, 128), dtype=np.uint8)
    image[:, :6] = 0
    return image


@pytest.fixture(scope="module")
def expected(model, roi) -> np.ndarray:
    """The in-memory model's embedding of `roi`, the reference every loaded encoder must reproduce."""
    with torch.no_grad():
        return l2_normalise(model.getFeatureCode(roi_tensor(palm_roi(roi)))[0].numpy())


@pytest.fixture
def save(tmp_path):
    """save(state, name): write a checkpoint into tmp_path and delete it after the test."""
    written = []

    def write(state, name="ccnet.pth"):
        path = tmp_path / name
        torch.save(state, path)
        written.append(path)
        return path
    yield write
    for path in written:
        path.unlink()


@pytest.fixture
def empty_weights_dir(tmp_path, monkeypatch):
    """A weights folder with nothing placed in it, and no BIOMEM_CCNET_WEIGHTS."""
    folder = tmp_path / "weights"
    folder.mkdir()
    monkeypatch.setenv("BIOMEM_WEIGHTS", str(folder))
    monkeypatch.delenv("BIOMEM_CCNET_WEIGHTS", raising=False)
    return folder


def test_architecture_flattens_to_13152_and_embeds_in_2048(model):
    x = torch.randn(1, 1, 128, 128)
    with torch.no_grad():
        assert model.features(x).shape == (1, 13152)
        code = model.getFeatureCode(x)
    assert code.shape == (1, 2048)
    assert torch.allclose(code.norm(dim=1), torch.ones(1))


def test_training_forward_gives_arcface_logits_and_contrastive_features(model):
    model.train()
    try:
        logits, features = model(torch.randn(2, 1, 128, 128), torch.tensor([1, 3]))
    finally:
        model.eval()
    assert logits.shape == (2, NUM_CLASSES)
    assert features.shape == (2, 4096 + 2048)


def test_input_is_normalised_over_non_zero_pixels_like_norm_single_roi(roi):
    tensor = roi_tensor(roi)
    inside = tensor[0, 0][roi > 0]
    assert tensor.shape == (1, 1, 128, 128)
    assert torch.all(tensor[0, 0][roi == 0] == 0)
    assert abs(inside.mean().item()) < 1e-5 and abs(inside.std().item() - 1) < 1e-4


def test_encoder_reproduces_the_in_memory_model(encoder, roi, expected):
    vector = encoder.encode(roi)
    assert vector.dtype == np.float32 and vector.shape == (2048,)
    assert np.isclose(np.linalg.norm(vector), 1.0, atol=1e-6)
    np.testing.assert_array_equal(vector, expected)
    np.testing.assert_array_equal(encoder.encode(roi), vector)  # deterministic
    assert encoder.num_classes == NUM_CLASSES  # head size read from the checkpoint


def test_concurrent_encodes_agree(encoder, roi, expected):
    results = [None] * 4

    def run(i):
        results[i] = encoder.encode(roi)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for vector in results:
        np.testing.assert_array_equal(vector, expected)


@pytest.mark.parametrize("wrap", ["dataparallel", "state_dict"])
def test_wrapped_checkpoints_load(model, save, roi, expected, wrap):
    state = model.state_dict()
    if wrap == "dataparallel":
        state = {f"module.{key}": value for key, value in state.items()}
    else:
        state = {"state_dict": state, "epoch": 3000}
    encoder = CCNetEncoder(weights=str(save(state)))
    np.testing.assert_array_equal(encoder.encode(roi), expected)


def test_default_source_is_the_env_variable(checkpoint, empty_weights_dir, monkeypatch, roi, expected):
    monkeypatch.setenv("BIOMEM_CCNET_WEIGHTS", str(checkpoint))
    np.testing.assert_array_equal(CCNetEncoder().encode(roi), expected)


def test_default_source_without_the_env_variable_is_ccnet_pth_in_the_weights_folder(checkpoint, empty_weights_dir):
    (empty_weights_dir / "ccnet.pth").symlink_to(checkpoint)
    assert checkpoint_path() == empty_weights_dir / "ccnet.pth"


def test_local_dir_source_reads_its_ccnet_pth(checkpoint, tmp_path, roi, expected):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "ccnet.pth").symlink_to(checkpoint)
    np.testing.assert_array_equal(CCNetEncoder(weights=f"local-dir:{folder}").encode(roi), expected)


@pytest.fixture
def hub_cache(checkpoint, tmp_path, empty_weights_dir, monkeypatch):
    """A Hugging Face cache made by hand holding someone/ccnet-palm with tongji/ccnet.pth and ccnet.pth."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = tmp_path / "hub" / "models--someone--ccnet-palm"
    for inner in ("tongji/ccnet.pth", "ccnet.pth"):
        placed = repo / "snapshots" / COMMIT / inner
        placed.parent.mkdir(parents=True, exist_ok=True)
        placed.symlink_to(checkpoint)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return tmp_path / "hub"


def test_hub_source_reads_the_hugging_face_cache_offline(hub_cache, roi, expected):
    encoder = CCNetEncoder(weights="hf-hub:someone/ccnet-palm/tongji/ccnet.pth", cache_dir=hub_cache)
    np.testing.assert_array_equal(encoder.encode(roi), expected)


def test_hub_source_naming_only_a_repo_means_its_ccnet_pth(hub_cache):
    path = checkpoint_path("hf-hub:someone/ccnet-palm", cache_dir=hub_cache)
    assert path.parts[-2:] == (COMMIT, "ccnet.pth")


def test_checkpoint_not_of_the_architecture_is_refused_naming_the_keys(model, save):
    state = dict(model.state_dict())
    del state["cb2.se1.fc.0.weight"]
    state["fc1.bias"] = torch.zeros(2047)
    state["cb4.sigma"] = torch.zeros(1)
    with pytest.raises(ModelUnavailableError) as refused:
        CCNetEncoder(weights=str(save(state)))
    message = str(refused.value)
    assert "missing keys (1): cb2.se1.fc.0.weight" in message
    assert "unexpected keys (1): cb4.sigma" in message
    assert "fc1.bias (2047,) != (2048,)" in message


def test_head_size_asked_for_must_match_the_checkpoint(checkpoint):
    with pytest.raises(ModelUnavailableError, match="600"):
        CCNetEncoder(weights=str(checkpoint), num_classes=600)


def test_file_that_is_not_a_checkpoint_is_refused(tmp_path):
    path = tmp_path / "ccnet.pth"
    path.write_bytes(b"not a torch file")
    with pytest.raises(ModelUnavailableError, match="cannot read"):
        CCNetEncoder(weights=str(path))


def test_missing_weights_say_where_to_put_the_authors_checkpoint(empty_weights_dir, tmp_path):
    with pytest.raises(ModelUnavailableError) as missing_default:
        CCNetEncoder()
    message = str(missing_default.value)
    assert str(empty_weights_dir / "ccnet.pth") in message
    assert "BIOMEM_CCNET_WEIGHTS" in message and "github.com/Zi-YuanYang/CCNet" in message
    with pytest.raises(ModelUnavailableError, match="nowhere.pth"):
        CCNetEncoder(weights=str(tmp_path / "nowhere.pth"))


def test_blank_image_is_not_a_palm(encoder):
    with pytest.raises(NoPalmError):
        encoder.encode(np.full((128, 128), 200, dtype=np.uint8))


def test_registry_metadata_needs_no_weights(empty_weights_dir):
    info = modalities.info("palm-ccnet")
    assert (info.name, info.kind, info.dim) == ("palm-ccnet", "palm", 2048)
    assert "uncalibrated" in info.threshold_source
