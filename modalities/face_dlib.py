"""dlib's 128-d ResNet face descriptor, shipped offline by the `face-recognition-models` wheel.

Pipeline: load_image -> HOG frontal face detector -> exactly one face or refuse -> 5-point
landmarks -> dlib's aligned 150x150 chip -> 128-d descriptor -> L2-normalised.
Only the 5-point predictor is used: the 68-point one is trained on iBUG 300-W, whose
licence excludes commercial use.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .base import Availability, Encoder, EncoderInfo, l2_normalise
from .errors import ModelUnavailableError, MultipleFacesError, NoFaceError
from .images import load_image
from .quality import FaceQuality, QualityBar, bar_of, pose, sharpness

SHAPE_PREDICTOR_FILE = "shape_predictor_5_face_landmarks.dat"
DESCRIPTOR_FILE = "dlib_face_recognition_resnet_model_v1.dat"

Box = tuple[int, int, int, int]  # (left, top, right, bottom) in the input image's pixels


class DlibFaceEncoder(Encoder):
    """Face encoder on dlib's ResNet model (LFW 99.38%); CPU-only, no network, thread-safe."""

    info = EncoderInfo(
        name="face-dlib",
        kind="face",
        dim=128,
        default_threshold=0.95,
        step_up_threshold=0.97,
        threshold_source=(
            "midpoint of max impostor 0.917 and min genuine 0.988 cosine over 7 people x (photo + 20 "
            "augmentations) (insightface t1.jpg + Tom_Hanks); dlib's 0.6 Euclidean rule (~0.917 here) "
            "admitted 5/8883 impostor pairs. Real captures score lower: calibrate on enrolments"
        ),
        weights="pip:face-recognition-models",
        license=(
            "public domain (Davis King, dlib-models); shipped by face-recognition-models under CC0 1.0. "
            "Trained on FaceScrub, VGG Face and web images"
        ),
        description=(
            "dlib HOG detector + 5-point alignment + ResNet-29 128-d descriptor; "
            "refuses images with no face or several faces"
        ),
    )

    # Measured on the sample faces and degraded copies of them: benchmarks/quality.py --encoder face-dlib.
    # Every sample photo and 673 augmented captures clear both (the worst: 75 px, yaw 38.6°, roll 41.2°, sharpness
    # 0.0041, score 0.04: HOG's margin does not tell faint faces apart, so its bar is the detector's own, 0).
    quality_bars = {"probe": QualityBar(min_size=40, max_yaw=50, max_roll=55, min_sharpness=0.0025, min_score=0.0),
                    "enrol": QualityBar(min_size=72, max_yaw=42, max_roll=45, min_sharpness=0.0038, min_score=0.0)}

    def __init__(
        self,
        models_dir: str | Path | None = None,
        *,
        upsample: int = 1,
        max_detect_side: int = 1024,
    ) -> None:
        """Load the detector, landmark predictor and descriptor network (about 0.7 s)."""
        try:
            import dlib
        except ImportError as exc:
            raise ModelUnavailableError("dlib is not installed: pip install dlib-bin") from exc
        directory = Path(models_dir) if models_dir is not None else default_models_dir()
        predictor_path = _model_file(directory, SHAPE_PREDICTOR_FILE)
        network_path = _model_file(directory, DESCRIPTOR_FILE)
        try:
            self._predictor = dlib.shape_predictor(str(predictor_path))
            self._network = dlib.face_recognition_model_v1(str(network_path))
        except RuntimeError as exc:
            raise ModelUnavailableError(f"cannot load the dlib models in {directory}: {exc}") from exc
        self._detector = dlib.get_frontal_face_detector()
        self._rectangle = dlib.rectangle
        self._chip = dlib.get_face_chip
        self.models_dir = directory
        self.upsample = upsample
        self.max_detect_side = max_detect_side
        # dlib's detector and network keep scratch buffers: one call at a time per instance.
        self._lock = threading.Lock()

    @classmethod
    def availability(cls) -> Availability:
        """Ready when dlib is installed and face-recognition-models holds both model files (neither imported)."""
        if importlib.util.find_spec("dlib") is None:
            return Availability(cls.info.name, False, "dlib is not installed: pip install dlib-bin", cls.info.weights)
        try:
            directory = default_models_dir()
            for name in (SHAPE_PREDICTOR_FILE, DESCRIPTOR_FILE):
                _model_file(directory, name)
        except ModelUnavailableError as exc:
            return Availability(cls.info.name, False, str(exc), cls.info.weights)
        return Availability(cls.info.name, True, f"dlib models found in {directory}", cls.info.weights)

    def encode(self, image: Any) -> np.ndarray:
        """Embed the single face in `image`; NoFaceError or MultipleFacesError otherwise."""
        return self._embed(load_image(image), None)

    def capture(self, image: Any, quality: str = "probe") -> np.ndarray:
        """Embed the single face in `image` if it clears the `quality` bar; PoorCaptureError with a hint otherwise."""
        return self._embed(load_image(image), quality)

    def assess(self, image: Any) -> FaceQuality:
        """The quality measures of the single face in `image` (NoFaceError or MultipleFacesError otherwise)."""
        rgb = load_image(image)
        with self._lock:
            return self._measure(rgb, *self._face(rgb))

    def detect(self, image: Any) -> list[Box]:
        """Boxes of every face found, in the input image's pixel coordinates."""
        rgb = load_image(image)
        with self._lock:
            rects, _ = self._detect(rgb)
        return [(r.left(), r.top(), r.right(), r.bottom()) for r in rects]

    def _embed(self, rgb: np.ndarray, quality: str | None) -> np.ndarray:
        """The descriptor of the one face, held to the `quality` bar unless None."""
        bar = bar_of(self.quality_bars, quality) if quality is not None else None
        with self._lock:
            rect, score, shape = self._face(rgb)
            if bar is not None:
                bar.check(self._measure(rgb, rect, score, shape), quality)
            descriptor = self._network.compute_face_descriptor(rgb, shape, 0)
        return l2_normalise(np.asarray(descriptor))

    def _face(self, rgb: np.ndarray) -> tuple[Any, float, Any]:
        """The one face's box, detector score and 5 landmarks; caller holds the lock."""
        rects, scores = self._detect(rgb)
        if not rects:
            raise NoFaceError("no face found in the image: face the camera in good light")
        if len(rects) > 1:
            raise MultipleFacesError(f"{len(rects)} faces found in the image; exactly one person must be in view")
        return rects[0], scores[0], self._predictor(rgb, rects[0])

    def _measure(self, rgb: np.ndarray, rect: Any, score: float, shape: Any) -> FaceQuality:
        """Quality measures of a face: box side, pose from the eye corners and nose, the aligned chip's sharpness."""
        points = np.array([(shape.part(i).x, shape.part(i).y) for i in range(5)], dtype=np.float64)
        eyes = sorted([points[0:2].mean(axis=0), points[2:4].mean(axis=0)], key=lambda p: p[0])
        yaw, roll = pose(eyes[0], eyes[1], points[4])
        chip = self._chip(rgb, shape, size=150)
        return FaceQuality(size=float(min(rect.width(), rect.height())), yaw=yaw, roll=roll,
                           sharpness=sharpness(chip), score=score)

    def _detect(self, rgb: np.ndarray) -> tuple[list[Any], list[float]]:
        """HOG on a copy downscaled to `max_detect_side`: boxes mapped back, and their scores; caller holds the lock."""
        height, width = rgb.shape[:2]
        scale = min(1.0, self.max_detect_side / max(height, width))
        if scale == 1.0:
            rects, scores, _ = self._detector.run(rgb, self.upsample)
            return list(rects), [float(s) for s in scores]
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        small = np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BILINEAR))
        rects, scores, _ = self._detector.run(small, self.upsample)
        boxes = [(r.left(), r.top(), r.right(), r.bottom()) for r in rects]
        return [self._rectangle(*(round(v / scale) for v in box)) for box in boxes], [float(s) for s in scores]


def default_models_dir() -> Path:
    """The `models/` folder of the installed face_recognition_models package, found without importing it."""
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or spec.origin is None:
        raise ModelUnavailableError(
            "face_recognition_models is not installed: pip install face-recognition-models, "
            "or pass models_dir= pointing at a folder holding "
            f"{SHAPE_PREDICTOR_FILE} and {DESCRIPTOR_FILE}"
        )
    return Path(spec.origin).parent / "models"


def _model_file(directory: Path, name: str) -> Path:
    """Path of model file `name` in `directory`, or ModelUnavailableError naming both."""
    path = directory / name
    if not path.is_file():
        raise ModelUnavailableError(
            f"dlib model file {name} not found in {directory}; install face-recognition-models "
            "or pass models_dir= pointing at a folder that holds it"
        )
    return path
