"""CCNet palmprint encoder (Yang et al., "Comprehensive Competition Mechanism in Palmprint
Recognition", IEEE TIFS 2023), the authors' architecture in torch.

The nn.Module classes follow models/ccnet.py of github.com/Zi-YuanYang/CCNet name for name
and key for key, so the authors' `net_params.pth` / `net_params_best.pth` load with strict
key matching. Pipeline: palm_roi (128x128 uint8) -> [0, 1] -> NormSingleROI (zero mean, unit
std over the non-zero pixels) -> three competitive blocks (13152) -> fc (4096) -> fc1 (2048)
-> L2 norm. The ArcFace head is kept for key compatibility and training; it is unused here.

No Hugging Face repo hosts CCNet weights: place the authors' checkpoint (Tongji, 600 classes,
or IITD, 460 classes; Google Drive links under "Pretrained Model" in their README) at
weights/ccnet.pth, or set BIOMEM_CCNET_WEIGHTS, or pass `weights=`.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from .base import Availability, Encoder, EncoderInfo, l2_normalise
from .errors import ModelUnavailableError
from .palm import palm_roi
from .weights import hub_blocked, locate, names_folder, resolve, weights_dir

EMBEDDING_DIM = 2048  # fc1, the matching feature
CHECKPOINT_FILE = "ccnet.pth"
WEIGHTS_ENV = "BIOMEM_CCNET_WEIGHTS"
SOURCE_URL = "https://github.com/Zi-YuanYang/CCNet#pretrained-model"


def default_weights() -> str:
    """$BIOMEM_CCNET_WEIGHTS, else ccnet.pth in the weights folder: no Hub repo hosts CCNet."""
    return os.environ.get(WEIGHTS_ENV) or str(weights_dir() / CHECKPOINT_FILE)


def checkpoint_path(source: str | None = None, cache_dir: str | os.PathLike | None = None) -> Path:
    """Local path of the checkpoint `source` names (default: default_weights()); a `local-dir:`
    folder or a bare `hf-hub:org/repo` means its ccnet.pth. The error says how to place one."""
    source = source or default_weights()
    try:
        return resolve(source, _checkpoint_file(source), cache_dir=cache_dir)
    except ModelUnavailableError as exc:
        raise ModelUnavailableError(
            f"{exc}. No official Hub repo hosts CCNet weights: download the authors' checkpoint (Tongji or IITD, "
            f"{SOURCE_URL}) and save it as {weights_dir() / CHECKPOINT_FILE}, or set {WEIGHTS_ENV}="
            "/path/to/net_params_best.pth, or pass weights=") from exc


def _checkpoint_file(source: str) -> str | None:
    """The file name to look for inside `source`: ccnet.pth for a `local-dir:` folder or a bare `hf-hub:org/repo`."""
    return CHECKPOINT_FILE if names_folder(source) else None


class CCNetEncoder(Encoder):
    """Palm encoder on the authors' CCNet checkpoint; 2048-d, CPU or GPU, no network, thread-safe."""

    info = EncoderInfo(
        name="palm-ccnet",
        kind="palm",
        dim=EMBEDDING_DIM,
        default_threshold=0.5,
        step_up_threshold=0.60,
        threshold_source=(
            "uncalibrated placeholder: no CCNet weights were at hand to measure genuine and impostor "
            "scores; run `biomem calibrate --modality palm-ccnet --data <ROIs, one folder per palm>`"
        ),
        weights=(
            f"${WEIGHTS_ENV}, else {CHECKPOINT_FILE} in the weights folder ($BIOMEM_WEIGHTS, default "
            f"./weights): the authors' checkpoint (Tongji or IITD, {SOURCE_URL}); no Hugging Face repo hosts it"
        ),
        license="MIT (official CCNet code); checkpoint licence per its authors",
        description=(
            "CCNet (Yang et al., IEEE TIFS 2023): learnable Gabor banks with channel and spatial "
            "competition on 1st- and 2nd-order texture; L2-normalised fc1 feature of a 128x128 "
            "grayscale palm ROI; refuses blank or flat images"
        ),
    )

    @classmethod
    def availability(cls) -> Availability:
        """Ready when torch is installed and the default checkpoint (default_weights()) is on this machine,
        or is an `hf-hub:` file that can be downloaded now; the checkpoint is not read."""
        source = default_weights()
        if importlib.util.find_spec("torch") is None:
            return Availability(cls.info.name, False, "torch is not installed: pip install torch", source)
        found = locate(source, _checkpoint_file(source))
        if found is not None:
            return Availability(cls.info.name, True, f"checkpoint found at {found}", source)
        blocked = hub_blocked() if source.startswith("hf-hub:") else "no Hub repo hosts it"
        if not blocked:
            return Availability(cls.info.name, True, f"checkpoint downloads from the Hugging Face Hub ({source}) "
                                "on first use", source)
        return Availability(cls.info.name, False, f"no CCNet checkpoint at {source} ({blocked}): save the authors' "
                            f"(Tongji or IITD, {SOURCE_URL}) there, or set {WEIGHTS_ENV}", source)

    def __init__(self, weights: str | None = None, *, num_classes: int | None = None, device: str = "cpu",
                 cache_dir: str | os.PathLike | None = None) -> None:
        """Load a CCNet checkpoint with strict keys; the head size comes from the checkpoint
        (`num_classes`, when given, must match it)."""
        import torch

        from .ccnet_net import HEAD_KEY, ccnet, check_keys, read_state_dict

        self.source = weights or default_weights()
        self.path = checkpoint_path(self.source, cache_dir)
        state = read_state_dict(self.path)
        head = state.get(HEAD_KEY)
        found = int(head.shape[0]) if head is not None and head.dim() == 2 else None
        if num_classes is not None and found is not None and found != num_classes:
            raise ModelUnavailableError(f"{self.path} has an ArcFace head of {found} classes, "
                                        f"not the {num_classes} asked for")
        self.num_classes = found or num_classes or 1  # no head: check_keys reports it missing
        model = ccnet(self.num_classes, EMBEDDING_DIM)
        check_keys(model, state, self.path)
        model.load_state_dict(state, strict=True)
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self._lock = threading.Lock()

    def encode(self, image: Any) -> np.ndarray:
        """Embed one cropped palm ROI; NoPalmError when the image is blank or flat."""
        import torch

        from .ccnet_net import roi_tensor

        batch = roi_tensor(palm_roi(image)).to(self.device)
        with self._lock, torch.no_grad():
            code = self.model.getFeatureCode(batch)
        return l2_normalise(code[0].cpu().numpy())

