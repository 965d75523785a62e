"""The text encoder's onnxruntime forward: the torch model's vectors, exported once, the torch path kept otherwise."""

import logging

import numpy as np

from biomem.notes import textonnx
from biomem.notes.textenc import TextEncoder
from biomem.notes.textonnx import OnnxSentenceForward, fingerprint


def _torch(text_encoder, texts):
    return text_encoder.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)


def test_the_default_encoder_runs_on_onnxruntime_with_the_torch_vectors(text_encoder):
    assert text_encoder.onnx is not None
    texts = [f"note {i}: my locker is {i * 7}" for i in range(66)]  # more than one batch of 64
    texts += ["What is my PIN?", "", "a very long note " * 200]  # an empty text, one truncated at 256 tokens
    vectors = text_encoder.encode(texts)
    assert vectors.shape == (69, 384) and vectors.dtype == np.float32 and vectors.flags.c_contiguous
    assert np.abs(vectors - _torch(text_encoder, texts)).max() < 1e-5
    assert np.abs(text_encoder.encode_one("What is my PIN?") - vectors[66]).max() < 1e-6


def test_the_export_is_made_once_then_reused(tmp_path, text_encoder, monkeypatch):
    assert OnnxSentenceForward.load(text_encoder.model, tmp_path) is not None
    assert [p.name for p in tmp_path.iterdir()] == [f"{fingerprint(text_encoder.model)}.onnx"]

    def no_export(*args):
        raise AssertionError("exported again")
    monkeypatch.setattr(textonnx, "export", no_export)
    assert OnnxSentenceForward.load(text_encoder.model, tmp_path) is not None


def test_a_broken_export_leaves_the_encoder_on_torch(tmp_path, text_encoder, caplog):
    (tmp_path / f"{fingerprint(text_encoder.model)}.onnx").write_bytes(b"not a model")
    with caplog.at_level(logging.WARNING, logger="biomem.notes.textonnx"):
        fallback = TextEncoder(onnx_cache=tmp_path)
    assert fallback.onnx is None and "stays on torch" in caplog.text
    texts = ["My PIN is 1234", "What is my PIN?"]
    assert np.abs(fallback.encode(texts) - text_encoder.encode(texts)).max() < 1e-5
