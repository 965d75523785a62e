"""Any timm backbone as a biometric encoder: `timm:<model>` names, and named configurations.

    modalities.create("timm:hf-hub:org/palmnet")                  # timm's config.json + weights on the Hub
    modalities.create("timm:local-dir:/models/palmnet")           # the same files in a folder
    modalities.create("timm:resnet50", weights="/runs/best.pth")  # an architecture timm knows + a checkpoint
    PalmNet = declare_timm("palm-mynet", "hf-hub:org/palmnet", kind="palm")
    modalities.register(PalmNet)    # or name PalmNet in the entry-point group biomem.modalities

`<model>` is what timm.create_model takes: `hf-hub:org/repo` or `local-dir:/folder` holding timm's
config.json and model.safetensors (else pytorch_model.bin), as timm's save_for_hf / push_to_hf_hub
write them, or an architecture timm knows (`resnet50`, `resnet50.a1_in1k`), whose default weights are
timm's own on the Hub. Files resolve through modalities.weights (the Hugging Face cache, then a download
unless HF_HUB_OFFLINE); timm never downloads: the model is built with pretrained=False and the
checkpoint loaded here (safetensors, or torch.load with weights_only=True) with strict keys, head
included, before reset_classifier(0) drops the head. The embedding is the pooled feature vector,
L2-normalised.

`info` (input size, mean/std, interpolation, crop, embedding dimension) is read from config.json on
first access, without torch or timm, as timm reads a pretrained config; an architecture without a
config.json is built on torch's meta device instead (timm imported, nothing allocated). Models whose
pooled features are wider than config.json's `num_features` (a head_hidden_size, as in MobileNetV3)
get the true width in the loaded encoder's `info`. availability() only looks files up.

The kind (face, palm, iris, other) and the preprocessing are declared, defaulting by kind: a face
takes the default face encoder's aligned 112x112 crop (modalities.arcface: SCRFD, one face or a
refusal, its quality bars) resized to the input size; every other kind is resized and centre-cropped
by timm's eval transform of the config, and a palm refuses a flat image as the palm encoders do.
A `timm:` name is of kind "other"; to serve faces or palms, declare a configuration by name.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .arcface import ArcFaceSmallEncoder
from .base import TIMM_PREFIX, Availability, Encoder, EncoderInfo, l2_normalise
from .errors import InvalidInputError, ModelUnavailableError, UnknownEncoderError, describe
from .images import load_image
from .palm import check_texture
from .quality import bar_of
from .weights import hub_blocked, locate, names_folder, resolve

KINDS = ("face", "palm", "iris", "other")
PREPROCESSING = ("face-align", "resize")  # the face detector's aligned crop; timm's resize and centre crop
CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # timm's Hub layout, in the order timm prefers them
TIMM = "timm==1.0.31"
DEFAULT_THRESHOLD = 0.5
DEFAULT_LICENSE = "the weights' publisher's"
THRESHOLD_SOURCE = ("uncalibrated placeholder: nothing is known of this model's scores; run `biomem calibrate "
                    "--modality {name} --data <images, one folder per person>`")
# What timm assumes when a pretrained config leaves a field out (timm.models.PretrainedCfg).
DATA_DEFAULTS: dict[str, Any] = {"input_size": (3, 224, 224), "interpolation": "bicubic", "crop_pct": 0.875,
                                 "crop_mode": "center", "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}


@dataclass(frozen=True)
class TimmEncoderInfo(EncoderInfo):
    """EncoderInfo of a timm model, with the input its pretrained config asks for."""

    model: str = ""  # timm's architecture
    preprocessing: str = "resize"  # one of PREPROCESSING
    input_size: tuple[int, ...] = DATA_DEFAULTS["input_size"]  # (channels, height, width)
    interpolation: str = DATA_DEFAULTS["interpolation"]
    crop_pct: float = DATA_DEFAULTS["crop_pct"]
    crop_mode: str = DATA_DEFAULTS["crop_mode"]
    mean: tuple[float, ...] = DATA_DEFAULTS["mean"]
    std: tuple[float, ...] = DATA_DEFAULTS["std"]


@dataclass(frozen=True)
class TimmConfig:
    """What a timm pretrained config says: the architecture, its head, its pooled-feature width, its
    constructor arguments and its input (DATA_DEFAULTS' keys)."""

    architecture: str
    num_classes: int | None  # None: the checkpoint's classifier decides (an architecture without config.json)
    dim: int
    model_args: dict[str, Any]
    data: dict[str, Any]


@dataclass(frozen=True)
class TimmSpec:
    """A declared timm configuration: registry name, timm model, checkpoint override, kind, preprocessing."""

    name: str
    model: str  # "hf-hub:org/repo", "local-dir:/folder" or a timm architecture
    weights: str | None = None  # a checkpoint file, local-dir: folder or hf-hub: repo/file (None: the model's own)
    kind: str = "other"
    preprocessing: str = "resize"
    threshold: float = DEFAULT_THRESHOLD
    license: str = DEFAULT_LICENSE
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.model or self.model.startswith(TIMM_PREFIX):
            raise InvalidInputError(f"a timm configuration needs a name and a model (hf-hub:org/repo, "
                                    f"local-dir:/folder or an architecture), got {self.name!r} and {self.model!r}")
        if self.kind not in KINDS:
            raise InvalidInputError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.preprocessing not in PREPROCESSING:
            raise InvalidInputError(f"preprocessing must be one of {PREPROCESSING}, got {self.preprocessing!r}")
        if not -1.0 <= self.threshold <= 1.0:
            raise InvalidInputError(f"the threshold is a cosine in [-1, 1], got {self.threshold}")

    @property
    def config_source(self) -> str | None:
        """Where config.json lies: the model itself when it is a Hub repo or a folder (None for an architecture)."""
        return self.model if self.model.startswith(("hf-hub:", "local-dir:")) else None

    @property
    def checkpoint_source(self) -> str | None:
        """Where the weights lie, as far as is known without timm: the override, the model's repo or folder, or
        for a tagged architecture timm's own repo (None: timm's registry names the default tag)."""
        tagged = f"hf-hub:timm/{self.model}" if "." in self.model else None
        return self.weights or self.config_source or tagged


class _ConfigInfo:
    """A configuration's `info`, read from its config on each access (the parse is cached): a class
    attribute that costs nothing until read, with `name` known at once for register()."""

    def __init__(self, spec: TimmSpec) -> None:
        self.spec = spec
        self.name = spec.name

    def __get__(self, instance: Any, owner: type) -> TimmEncoderInfo:
        return describe_spec(self.spec)[1]


class TimmEncoder(Encoder):
    """A timm backbone's pooled features, L2-normalised, for the kind of capture its configuration
    declares; thread-safe. Concrete classes come from declare_timm() or a `timm:` name."""

    spec: TimmSpec

    @classmethod
    def availability(cls) -> Availability:
        """Ready when torch and timm are installed (and, for faces, the face detector) and config.json and a
        checkpoint are on this machine or can come from the Hub now: file look-ups, nothing imported."""
        spec = cls.spec
        source = spec.checkpoint_source or spec.model
        missing = [module for module in ("torch", "timm") if importlib.util.find_spec(module) is None]
        if missing:
            return Availability(spec.name, False, f"{' and '.join(missing)} not installed: pip install {TIMM}", source)
        if spec.preprocessing == "face-align":
            faces = ArcFaceSmallEncoder.availability()
            if not faces.ready:
                return Availability(spec.name, False, f"its face detector is unavailable: {faces.reason}", source)
        if spec.checkpoint_source is None:
            blocked = hub_blocked()
            if blocked:
                return Availability(spec.name, False, f"timm's default weights of {spec.model} are named by timm's "
                                    f"registry, not checked here, and {blocked}: name the tag "
                                    f"(timm:{spec.model}.<tag>) or declare weights", source)
            return Availability(spec.name, True, f"timm's default weights of {spec.model} download from the "
                                "Hugging Face Hub on first use", source)
        wanted = [(spec.config_source, (CONFIG_FILE,))] if spec.config_source else []
        wanted.append((spec.checkpoint_source, _checkpoint_files(spec.checkpoint_source)))
        found, absent = [], []
        for where, files in wanted:
            path = next((p for f in files if (p := locate(where, f, by_name=False)) is not None), None)
            if path is None:
                absent.append((where, files))
            else:
                found.append(path)
        if not absent:
            return Availability(spec.name, True, f"weights found at {found[-1]}", source)
        blocked = next((hub_blocked() for where, _ in absent if where.startswith("hf-hub:")), "not on this machine")
        if not blocked:
            return Availability(spec.name, True, f"downloads from the Hugging Face Hub ({source}) on first use", source)
        where, files = absent[0]
        return Availability(spec.name, False, f"{' or '.join(f or 'the checkpoint' for f in files)} not found in "
                            f"{where} ({blocked})", source)

    def __init__(self, weights: str | None = None, *, device: str = "cpu", cache_dir: str | Path | None = None) -> None:
        """Build the architecture with timm (pretrained=False: timm downloads nothing), load the checkpoint
        (`weights`, else the configuration's) with strict keys and drop the classifier; a face configuration
        also loads the face detector."""
        _, torch = _timm()
        spec = self.spec if weights is None else replace(self.spec, weights=weights)
        config, info = describe_spec(spec, cache_dir)
        self.path = _find_checkpoint(_default_weights(spec), cache_dir)
        self.device = torch.device(device)
        self.model = _load_model(config, self.path).to(self.device)
        dim = _pooled_dim(self.model)
        self.info = info if dim == info.dim else replace(info, dim=dim)
        self._transform = _transform(self.info)
        self._faces = ArcFaceSmallEncoder() if spec.preprocessing == "face-align" else None
        self._lock = threading.Lock()

    def encode(self, image: Any) -> np.ndarray:
        """Embed one capture; a face configuration refuses an image without exactly one face, a palm one a
        flat image."""
        return self.embed(self.preprocess(image))

    def capture(self, image: Any, quality: str = "probe") -> np.ndarray:
        """Embed a live capture; a face must clear the face detector's `quality` bar (PoorCaptureError with a hint)."""
        return self.embed(self._tensor(self._pixels(image, quality)))

    def preprocess(self, image: Any) -> Any:
        """The network's input for one capture, a 1xCxHxW torch tensor: what encode() feeds the model."""
        return self._tensor(self._pixels(image))

    def embed(self, batch: Any) -> np.ndarray:
        """The L2-normalised pooled features of a preprocessed 1xCxHxW tensor."""
        import torch

        with self._lock, torch.inference_mode():
            features = self.model(batch.to(self.device))
        return l2_normalise(features[0].float().cpu().numpy())

    def _pixels(self, image: Any, quality: str | None = None) -> np.ndarray:
        """The RGB pixels the transform takes: the aligned face crop (held to `quality` when given), or the image."""
        if self._faces is not None:
            crop, measured = self._faces.aligned(image)
            if quality is not None:
                bar_of(self._faces.quality_bars, quality).check(measured, quality)
            return crop
        rgb = load_image(image)
        if self.info.kind == "palm":
            check_texture(np.asarray(Image.fromarray(rgb).convert("L")))
        return rgb

    def _tensor(self, rgb: np.ndarray) -> Any:
        picture = Image.fromarray(rgb)
        return self._transform(picture.convert("L") if self.info.input_size[0] == 1 else picture).unsqueeze(0)


def declare_timm(name: str, model: str, *, weights: str | None = None, kind: str = "other",
                 preprocessing: str | None = None, threshold: float = DEFAULT_THRESHOLD,
                 license: str = DEFAULT_LICENSE, description: str = "") -> type[TimmEncoder]:
    """An Encoder class serving `kind` captures with timm `model` under registry name `name`: register() it,
    or name it in the entry-point group biomem.modalities. Nothing is read until its info or weights are."""
    spec = TimmSpec(name, model, weights, kind, preprocessing or ("face-align" if kind == "face" else "resize"),
                    threshold, license, description)
    return type(TimmEncoder)(f"TimmEncoder[{name}]", (TimmEncoder,), {
        "spec": spec, "info": _ConfigInfo(spec), "__module__": __name__,
        "__doc__": f"{name}: timm {model}, {kind} captures"})


_named: dict[str, type[TimmEncoder]] = {}


def timm_class(name: str) -> type[TimmEncoder]:
    """The encoder class of a `timm:<model>` name (kind "other", the model's own weights), made once per name."""
    if name not in _named:
        _named[name] = declare_timm(name, name.removeprefix(TIMM_PREFIX))
    return _named[name]


def describe_spec(spec: TimmSpec, cache_dir: str | Path | None = None) -> tuple[TimmConfig, TimmEncoderInfo]:
    """The configuration's timm config and its EncoderInfo, without loading weights: config.json is located (or
    downloaded, unless HF_HUB_OFFLINE) and parsed; an architecture without one is built on the meta device."""
    if spec.config_source:
        config = read_config(resolve(spec.config_source, CONFIG_FILE, cache_dir=cache_dir, by_name=False))
    else:
        config = architecture_config(spec.model)
    steps = ("the face detector's aligned crop, resized to" if spec.preprocessing == "face-align"
             else "resized and centre-cropped to")
    described = spec.description or (f"timm {config.architecture} on {spec.kind} captures: {steps} "
                                     f"{'x'.join(map(str, config.data['input_size'][1:]))}, pooled features "
                                     "(no classifier head), L2-normalised")
    default_weights = f"timm's default weights of {spec.model} (Hugging Face Hub)"
    return config, TimmEncoderInfo(
        name=spec.name, kind=spec.kind, dim=config.dim, default_threshold=spec.threshold,
        threshold_source=THRESHOLD_SOURCE.format(name=spec.name), weights=spec.weights or spec.config_source
        or default_weights, license=spec.license, description=described, model=config.architecture,
        preprocessing=spec.preprocessing, **config.data)


def read_config(path: Path) -> TimmConfig:
    """timm's config.json at `path` (save_for_hf's layout, or timm's older single dict); ModelUnavailableError
    when it is not one. Parsed once per file version."""
    stat = Path(path).stat()
    return _read_config(Path(path).resolve(), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=32)
def _read_config(path: Path, size: int, mtime_ns: int) -> TimmConfig:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelUnavailableError(f"{path} is not a readable JSON config: {describe(exc)}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("architecture"), str) \
            or not isinstance(raw.get("num_features"), int) or not isinstance(raw.get("pretrained_cfg", {}), dict):
        looks = "; it is a transformers config" if isinstance(raw, dict) and "model_type" in raw else ""
        raise ModelUnavailableError(f"{path} is not timm's config.json (it needs 'architecture' and "
                                    f"'num_features'{looks}): publish the model with timm's push_to_hf_hub or "
                                    "save_for_hf")
    pretrained = raw.get("pretrained_cfg", raw)
    model_args = dict(raw.get("model_args") or {})
    data = {key: pretrained.get(key) or default for key, default in DATA_DEFAULTS.items()}
    size_of = tuple(data["input_size"])
    if model_args.get("in_chans"):  # as timm's _parse_model_cfg: the channels the weights were saved for
        size_of = (int(model_args["in_chans"]), *size_of[1:])
    if model_args.get("img_size") and pretrained.get("fixed_input_size"):
        image = model_args["img_size"]
        size_of = (size_of[0], *((image, image) if isinstance(image, int) else image))
    data.update(input_size=tuple(size_of), mean=tuple(data["mean"]), std=tuple(data["std"]))
    num_classes = raw.get("num_classes", pretrained.get("num_classes"))
    return TimmConfig(raw["architecture"], int(num_classes or 0), raw["num_features"], model_args, data)


@lru_cache(maxsize=32)
def architecture_config(model: str) -> TimmConfig:
    """The config of an architecture timm knows (optionally `.tag`): its registry's pretrained config, and the
    pooled width of the model built on torch's meta device; UnknownEncoderError when timm does not know it."""
    timm, torch = _timm()
    if not timm.is_model(model):
        raise UnknownEncoderError(f"timm {timm.__version__} knows no model {model!r}; see timm.list_models()")
    try:
        pretrained = timm.models.get_pretrained_cfg(model)
    except RuntimeError as exc:  # an unknown tag
        raise UnknownEncoderError(f"timm knows no weights {model!r}: {exc}") from None
    with torch.device("meta"):
        built = timm.create_model(model, pretrained=False, num_classes=0)
    cfg = pretrained.to_dict() if pretrained is not None else {}
    data = {key: cfg.get(key) or default for key, default in DATA_DEFAULTS.items()}
    data.update(input_size=tuple(data["input_size"]), mean=tuple(data["mean"]), std=tuple(data["std"]))
    return TimmConfig(built.pretrained_cfg.get("architecture") or model, None, _pooled_dim(built), {}, data)


def _default_weights(spec: TimmSpec) -> str:
    """The checkpoint source create() loads: the declared one, the model's repo or folder, else timm's default."""
    if spec.weights or spec.config_source:
        return spec.weights or spec.config_source or ""
    timm, _ = _timm()
    hub_id = getattr(timm.models.get_pretrained_cfg(spec.model), "hf_hub_id", None)
    if not hub_id:
        raise ModelUnavailableError(f"timm has no Hub weights for {spec.model}: declare weights (a checkpoint "
                                    "path, a local-dir: folder or an hf-hub: repo)")
    return f"hf-hub:{hub_id}"


def _checkpoint_files(source: str) -> tuple[str | None, ...]:
    """The file names a checkpoint source may hold, in timm's order; (None,) for a source naming one file."""
    return WEIGHT_FILES if names_folder(source) else (None,)


def _find_checkpoint(source: str, cache_dir: str | Path | None) -> Path:
    """The checkpoint file of `source` on this machine (safetensors first), else downloaded from the Hub."""
    files = _checkpoint_files(source)
    for file in files:
        found = locate(source, file, cache_dir=cache_dir, by_name=False)
        if found is not None:
            return found
    misses = []
    for file in files:
        try:
            return resolve(source, file, cache_dir=cache_dir, by_name=False)
        except ModelUnavailableError as exc:
            misses.append(str(exc))
    raise ModelUnavailableError(misses[0] if len(misses) == 1 else
                                f"no checkpoint ({' or '.join(WEIGHT_FILES)}) in {source}: {'; '.join(misses)}")


def _load_model(config: TimmConfig, path: Path) -> Any:
    """timm's architecture with the checkpoint at `path` loaded with strict keys (head included), then headless."""
    timm, _ = _timm()
    from timm.models import load_state_dict

    try:
        state = load_state_dict(str(path), weights_only=True)
    except Exception as exc:  # torch's unpickler and safetensors raise many kinds
        raise ModelUnavailableError(f"{path} is not a checkpoint safetensors or torch.load(weights_only=True) "
                                    f"reads: {describe(exc)}") from None
    num_classes = config.num_classes
    if num_classes is None:  # an architecture without config.json: the checkpoint's classifier rows say
        classifier = timm.models.get_pretrained_cfg_value(config.architecture, "classifier") or ""
        classifier = classifier if isinstance(classifier, str) else classifier[0]
        head = state.get(f"{classifier}.weight")
        num_classes = int(head.shape[0]) if head is not None and head.dim() == 2 else 0
    if not timm.is_model(config.architecture):
        raise ModelUnavailableError(f"the model's config names the architecture {config.architecture!r}, which timm "
                                    f"{timm.__version__} does not know: upgrade timm")
    arguments = {key: value for key, value in config.model_args.items() if key != "num_classes"}
    try:
        model = timm.create_model(config.architecture, pretrained=False, num_classes=num_classes, **arguments)
    except (TypeError, ValueError, RuntimeError) as exc:  # model_args the architecture does not take
        raise ModelUnavailableError(f"timm cannot build {config.architecture} with the config's model_args "
                                    f"{arguments}: {describe(exc)}") from None
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())
        raise ModelUnavailableError(f"{path} does not fit timm's {config.architecture} "
                                    f"({num_classes} classes): {detail[:600]}") from None
    model.reset_classifier(0)
    return model.eval()


def _pooled_dim(model: Any) -> int:
    """The width of a headless timm model's output: its pre-logits size where it has one, else num_features."""
    return int(getattr(model, "head_hidden_size", None) or model.num_features)


def _transform(info: TimmEncoderInfo) -> Any:
    """timm's eval transform for `info`'s input; an aligned face is resized whole (no crop into it)."""
    from timm.data import create_transform

    crop_pct = 1.0 if info.preprocessing == "face-align" else info.crop_pct
    return create_transform(input_size=info.input_size, interpolation=info.interpolation, mean=info.mean,
                            std=info.std, crop_pct=crop_pct, crop_mode=info.crop_mode)


def _timm() -> tuple[Any, Any]:
    """timm and torch, imported on first use (seconds); ModelUnavailableError with the install line without them."""
    try:
        import timm
        import torch
    except ImportError as exc:
        raise ModelUnavailableError(f"timm encoders need torch and timm: pip install {TIMM} ({exc})") from exc
    return timm, torch
