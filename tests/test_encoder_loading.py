"""Encoders load per name: one slow or failing encoder never holds up requests that use another.

A visitor who picks an encoder whose weights take long to load (or never come) must not make
every other visitor's ask wait; and concurrent first uses of one encoder load it once.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import modalities
from modalities import Encoder, EncoderInfo
from modalities.errors import ModelUnavailableError


class GatedEncoder(Encoder):
    """An encoder whose loading waits until the test opens the gate, counting its loads."""

    info = EncoderInfo(name="test-gated", kind="other", dim=4, default_threshold=0.5,
                       description="test", weights="none", license="MIT",
                       threshold_source="test")
    gate = threading.Event()
    loading = threading.Event()  # set once a load has begun
    loads = 0

    def __init__(self) -> None:
        type(self).loads += 1
        self.loading.set()
        if not self.gate.wait(30):
            raise TimeoutError("the test never opened the gate")

    def encode(self, image) -> np.ndarray:
        return np.ones(4, np.float32) / 2


@pytest.fixture
def gated(monkeypatch):
    monkeypatch.setattr(modalities, "_registered", {**modalities._registered, GatedEncoder.info.name: GatedEncoder})
    GatedEncoder.gate.clear()
    GatedEncoder.loading.clear()
    GatedEncoder.loads = 0
    yield GatedEncoder
    GatedEncoder.gate.set()


def test_a_slow_encoder_does_not_hold_up_another(make_memory, gated):
    mem = make_memory()
    loading = [threading.Thread(target=mem.encoder, args=("test-gated",)) for _ in range(3)]
    for thread in loading:
        thread.start()
    assert gated.loading.wait(30)  # one of them is inside the slow load; the others wait for it or come later
    # Other encoders load while it is held: had they waited for it, they would return only after the gate
    # timed out (it opens below), and the three threads would have ended.
    assert mem.encoder("palm-compcode").name == "palm-compcode"
    assert mem.encoder().name == "face-arcface-s"
    assert all(thread.is_alive() for thread in loading)
    gated.gate.set()
    for thread in loading:
        thread.join(10)
    assert gated.loads == 1  # three concurrent first uses, one load


def test_an_encoder_that_cannot_load_fails_alone(make_memory, monkeypatch):
    mem = make_memory()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError):
        mem.encoder("palm-ccnet")  # no checkpoint here
    assert mem.encoder("palm-compcode").name == "palm-compcode"
