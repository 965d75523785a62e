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
        rgb = load_image(image)
        with self._lock:
            rects = self._detect(rgb)
            if not rects:
                raise NoFaceError("no face found in the image: face the camera in good light")
            if len(rects) > 1:
                raise MultipleFacesError(
                    f"{len(rects)} faces found in the image; exactly one person must be in view"
                )
            shape = self._predictor(rgb, rects[0])
            descriptor = self._network.compute_face_descriptor(rgb, shape, 0)
        return l2_normalise(np.asarray(descriptor))

    def detect(self, image: Any) -> list[Box]:
        """Boxes of every face found, in the input image's pixel coordinates."""
        rgb = load_image(image)
        with self._lock:
            rects = self._detect(rgb)
        return [(r.left(), r.top(), r.right(), r.bottom()) for r in rects]

    def _detect(self, rgb: np.ndarray) -> list[Any]:
        """HOG on a copy downscaled to `max_detect_side`, boxes mapped back; caller holds the lock."""
        height, width = rgb.shape[:2]
        scale = min(1.0, self.max_detect_side / max(height, width))
        if scale == 1.0:
            return list(self._detector(rgb, self.upsample))
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        small = np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BILINEAR))
        boxes = [(r.left(), r.top(), r.right(), r.bottom()) for r in self._detector(small, self.upsample)]
        return [self._rectangle(*(round(v / scale) for v in box)) for box in boxes]


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
