"""The text encoder resolves offline: local folder, a Hub cache, the pip-shipped model."""

import shutil

import numpy as np
import pytest

from biomem.errors import ModelUnavailableError
from biomem.notes.textenc import TextEncoder, shipped_minilm_dir
from biomem.notes.textonnx import fingerprint


def test_default_encoder_is_all_minilm_and_unit_norm(text_encoder):
    assert text_encoder.dim == 384
    vectors = text_encoder.encode(["My PIN is 1234", "What is my PIN?", "I adopted a beagle"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[2] @ vectors[1]


def test_local_folder_and_hand_made_hub_cache_give_the_same_vectors(tmp_path, text_encoder):
    local = tmp_path / "minilm"
    shutil.copytree(shipped_minilm_dir(), local)
    # A Hugging Face cache laid out by hand: models--org--name/{refs/main, snapshots/<commit>/...}
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = tmp_path / "hub" / "models--acme--minilm-copy"
    shutil.copytree(shipped_minilm_dir(), repo_dir / "snapshots" / commit)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)

    exports = tmp_path / "onnx"
    from_folder = TextEncoder(str(local), onnx_cache=exports)
    from_cache = TextEncoder("hf-hub:acme/minilm-copy", cache_dir=tmp_path / "hub", onnx_cache=exports)
    assert from_folder.onnx is not None and from_cache.onnx is not None
    # The same weights from two places: one export, under the shipped model's own fingerprint.
    assert [p.name for p in exports.iterdir()] == [f"{fingerprint(text_encoder.model)}.onnx"]
    reference = text_encoder.encode(["the same sentence"])
    assert np.allclose(from_folder.encode(["the same sentence"]), reference, atol=1e-5)
    assert np.allclose(from_cache.encode(["the same sentence"]), reference, atol=1e-5)


def test_a_model_that_is_nowhere_offline_is_a_clear_error(tmp_path):
    with pytest.raises(ModelUnavailableError, match="acme/not-there"):
        TextEncoder("acme/not-there", cache_dir=tmp_path / "empty-hub")


def test_static_word_vectors_rank_related_words_higher(text_encoder):
    vectors = text_encoder.word_vectors(["dog", "puppy", "invoice"])
    assert vectors.shape == (3, 384)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
