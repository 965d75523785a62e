"""A request's body as httpx sends it for BioMemoryClient: the probe as files (a burst's field once per frame,
`probe_<modality>` for each kind), enrolment images (`images`, `images_<modality>`), or JSON when an admin sends a
precomputed embedding; the forms a probe may take are the client's module docstring's."""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import errors
from ..identity.bursts import Burst


def _image_bytes(image: Any) -> bytes:
    """Bytes of an image given as a path, bytes, a numpy array or a PIL image (arrays and PIL as PNG)."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if isinstance(image, (str, os.PathLike)):
        return Path(image).read_bytes()
    from PIL import Image

    picture = image if isinstance(image, Image.Image) else Image.fromarray(image)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def _mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg"
    return "application/octet-stream"


def _parts(probe: Any) -> list[tuple[str | None, Any]]:
    """A probe as (modality or None for the store's default, an image, a Burst or a Probe) pairs; a list or
    tuple under a modality is a Burst of it, a top-level one is refused (see the module's probe forms)."""
    if probe is None:
        return []
    if isinstance(probe, dict):
        return [(modality, Burst(sample) if isinstance(sample, (list, tuple)) else sample)
                for modality, sample in probe.items()]
    if isinstance(probe, (list, tuple)):
        raise errors.InvalidInputError("a probe is not a list: send Burst([...]) for frames of one person, or "
                                       "{modality: image} for several modalities")
    return [(None, probe)]


def _is_embedding(probe: Any) -> bool:
    from ..identity.gate import Probe

    return any(isinstance(sample, Probe) for _, sample in _parts(probe))


def _frames(burst: Burst) -> tuple[Any, ...]:
    """A burst's frames, each an image: a precomputed embedding is one probe, never a frame."""
    from ..identity.gate import Probe

    if any(isinstance(frame, Probe) for frame in burst.frames):
        raise errors.InvalidInputError("a burst is images only: send a precomputed embedding alone, as the probe")
    return burst.frames


def _json_image(image: Any) -> dict[str, Any]:
    from ..identity.gate import Probe

    if isinstance(image, Probe):
        return {"embedding": [float(x) for x in image.embedding], "modality": image.modality}
    data = _image_bytes(image)
    mime = _mime(data)  # an image the client does not name goes without a type: the server reads the bytes
    return {"data": base64.b64encode(data).decode(), **({"mime_type": mime} if mime.startswith("image/") else {})}


def _json_sample(sample: Any) -> Any:
    """An image or Probe as a JSON object, a Burst as a list of them."""
    return [_json_image(frame) for frame in _frames(sample)] if isinstance(sample, Burst) else _json_image(sample)


def _json_probe(field: str, probe: Any) -> dict[str, Any]:
    """A probe as JSON fields: {field: image or [frame, ...]} or, for several modalities,
    {field + "s": {modality: image or [frame, ...]}}."""
    parts = _parts(probe)
    if not parts:
        return {}
    if isinstance(probe, dict):
        return {f"{field}s": {modality: _json_sample(sample) for modality, sample in parts}}
    return {field: _json_sample(parts[0][1])}


def _probe_files(field: str, probe: Any) -> list[tuple[str, tuple[str, bytes, str]]]:
    """A probe as multipart files: `field`, or `field`_<modality> for each image of several modalities; a burst
    sends its field once per frame."""
    files = []
    for name, sample in _parts(probe):
        for image in _frames(sample) if isinstance(sample, Burst) else (sample,):
            data = _image_bytes(image)
            files.append((f"{field}_{name}" if name else field, (field, data, _mime(data))))
    return files


def request_body(fields: dict[str, Any], probe: Any = None, images: Sequence[Any] | dict[str, Sequence[Any]] = (),
                 member_probe: Any = None) -> dict[str, Any]:
    """httpx keyword arguments of a body: multipart (probe files beside the fields, a burst's field once per
    frame; lists and objects as JSON text), or JSON for an admin's precomputed embedding (a burst beside it as
    a list of base64 frames; JSON too when nothing is sent as a file). `member_probe`: the newcomer's probe of a
    household. `images`: an enrolment's, or {modality: images} for captures of several kinds. Probes take the forms
    the module docstring lists."""
    fields = {k: v for k, v in fields.items() if v is not None}
    if _is_embedding(probe) or _is_embedding(member_probe):
        return {"json": {**fields, **_json_probe("probe", probe), **_json_probe("member_probe", member_probe)}}
    files = _probe_files("probe", probe) + _probe_files("member_probe", member_probe)
    kinds = images if isinstance(images, dict) else {None: images}
    for name, items in kinds.items():
        for i, image in enumerate(items):
            data = _image_bytes(image)
            files.append((f"images_{name}" if name else "images", (f"image-{i}", data, _mime(data))))
    if not files:
        return {"json": fields}
    return {"data": {k: _form_value(v) for k, v in fields.items()}, "files": files}


def _form_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)  # one form field of JSON text
    return str(value)
