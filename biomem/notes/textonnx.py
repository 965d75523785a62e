"""The text encoder's forward pass on onnxruntime: sentence-transformers' vectors at a third of the CPU.

all-MiniLM-L6-v2 in torch took 16 ms per question on the 2-core benchmark machine, most of it
Python dispatch around small matrix products; the same graph on onnxruntime takes 5 ms on one
thread and needs no lock, so two requests embed at once. The graph is exported here, offline,
from the loaded model (torch.onnx's TorchScript exporter) on first use and cached as
`<cache>/<fingerprint of the weights>.onnx`; each load checks it against the torch forward.
Tokenisation stays sentence-transformers' own (`preprocess`); pooling and normalisation mirror
its Pooling("mean") and Normalize modules. Other pipelines keep the torch path (load returns None).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

OPSET = 17
CHECK_TEXTS = ["What is my gym locker number?", "I adopted a beagle called Max, and he loves the park."]
CHECK_TOLERANCE = 1e-4  # largest difference from the torch vectors a loaded export may show


class OnnxSentenceForward:
    """Transformer -> mean pooling -> unit norm of a SentenceTransformer, on onnxruntime; thread-safe."""

    def __init__(self, session: Any, inputs: list[str]) -> None:
        self.session, self.inputs = session, inputs

    @classmethod
    def load(cls, model: Any, cache_dir: str | os.PathLike) -> OnnxSentenceForward | None:
        """The export of `model` (made and cached under `cache_dir` if missing), or None when the model
        is not Transformer -> Pooling("mean") -> Normalize without a prompt, or its export fails the check."""
        if [type(module).__name__ for module in model] != ["Transformer", "Pooling", "Normalize"] \
                or getattr(model[1], "pooling_mode", None) != "mean" or model.default_prompt_name:
            return None
        sample = model.preprocess(CHECK_TEXTS)
        inputs = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in sample]
        path = Path(cache_dir) / f"{fingerprint(model)}.onnx"
        try:
            if not path.exists():
                export(model, sample, inputs, path)
            forward = cls(session(path), inputs)
            expected = model.encode(CHECK_TEXTS, normalize_embeddings=True, convert_to_numpy=True)
            difference = float(np.abs(forward.run(sample) - expected).max())
        except Exception as exc:  # torch.onnx and onnxruntime raise many types: the torch path still works
            log.warning("text encoder stays on torch: no ONNX export at %s (%s: %s)", path, type(exc).__name__, exc)
            return None
        if difference > CHECK_TOLERANCE:
            log.warning("text encoder stays on torch: %s differs from the model by %.2g", path, difference)
            return None
        return forward

    def run(self, features: dict[str, Any]) -> np.ndarray:
        """Unit-norm sentence vectors (float32) of `preprocess` output (torch tensors)."""
        feed = {name: features[name].numpy() for name in self.inputs}
        tokens = self.session.run(None, feed)[0]
        mask = feed["attention_mask"][..., None].astype(np.float32)
        pooled = (tokens * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def fingerprint(model: Any) -> str:
    """A digest of the transformer's config and weights and the exporter's version: a changed model
    or torch gets a new export, never a stale one. Where the model was loaded from is left out, so the
    same weights in another folder or Hub cache reuse the export instead of adding 90 MB each."""
    import torch

    transformer = model[0].auto_model
    config = {key: value for key, value in transformer.config.to_dict().items() if key != "_name_or_path"}
    digest = hashlib.blake2b(digest_size=16)
    digest.update(json.dumps([torch.__version__, OPSET, config], sort_keys=True, default=str).encode())
    for name, tensor in transformer.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def export(model: Any, sample: dict[str, Any], inputs: list[str], path: Path) -> None:
    """Write the transformer's graph (token states, dynamic batch and length) to `path`, atomically."""
    import torch

    class Graph(torch.nn.Module):
        """The transformer with positional inputs and its token states as the one output."""

        def __init__(self, transformer: torch.nn.Module) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return self.transformer(**dict(zip(inputs, tensors))).last_hidden_state

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    axes = {name: {0: "batch", 1: "tokens"} for name in [*inputs, "tokens"]}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notices
        torch.onnx.export(Graph(model[0].auto_model).eval(), tuple(sample[name] for name in inputs), str(partial),
                          input_names=inputs, output_names=["tokens"], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)
    os.replace(partial, path)  # another process exporting the same model writes the same file


def session(path: Path) -> Any:
    """An onnxruntime session like the face encoders': one intra-op thread per core pair, no spinning
    (an idle spinning pool slowed the next ArcFace encode), run in the caller's thread."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = max(1, min(4, (os.cpu_count() or 2) // 2))
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
