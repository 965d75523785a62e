"""Palmprint region of interest shared by the palm encoders: 128x128 grayscale.

Palm encoders take an ROI already cropped and aligned (as PolyU, Tongji and the synthetic
generator provide). We refuse images that cannot be one: too small, or nearly uniform
(no lines or texture to encode).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from .errors import NoPalmError
from .images import load_image

ROI_SIZE = 128
MIN_TEXTURE_STD = 4.0  # grey levels; a blank or flat image carries no palm lines


def palm_roi(image: Any, size: int = ROI_SIZE) -> np.ndarray:
    """The image as a `size`x`size` uint8 grayscale ROI; NoPalmError when it has no texture."""
    rgb = load_image(image)
    gray = Image.fromarray(rgb).convert("L")
    if gray.size != (size, size):
        gray = gray.resize((size, size), Image.Resampling.BILINEAR)
    roi = np.asarray(gray)
    check_texture(roi)
    return roi


def check_texture(gray: np.ndarray) -> None:
    """NoPalmError when a grayscale image is nearly uniform: a blank or flat image has no palm lines to encode."""
    if float(gray.std()) < MIN_TEXTURE_STD:
        raise NoPalmError("no palm region found: the image is blank or flat; "
                          "give a cropped palm ROI (lines visible)")
