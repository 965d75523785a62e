"""The encoder registry: built-ins, a third-party plugin found through its entry point, register(), errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import modalities
from modalities import Encoder, EncoderInfo, l2_normalise
from modalities.errors import BioMemError, PluginError, UnknownEncoderError, UnknownModalityError

REPO = Path(__file__).resolve().parents[1]

PLUGIN_SOURCE = '''
import numpy as np

from modalities import Encoder, EncoderInfo, l2_normalise


class DemoEncoder(Encoder):
    info = EncoderInfo(
        name="other-demo",
        kind="other",
        dim=4,
        default_threshold=0.5,
        threshold_source="made up by the test",
        weights="none",
        license="MIT",
        description="a third-party encoder installed only for this test",
    )

    def encode(self, image):
        return l2_normalise(np.arange(1, 5))


NotAnEncoder = "an entry point may name anything; the registry must refuse this"
'''


def install_plugin(root: Path, package: str, entry_points: str) -> None:
    """Lay out `package` and a `<package>-0.1.dist-info` folder under `root`, as pip would."""
    (root / package).mkdir()
    (root / package / "__init__.py").write_text(PLUGIN_SOURCE)
    dist_info = root / f"{package}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[{modalities.ENTRY_POINT_GROUP}]\n{entry_points}\n")


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    """A folder on sys.path (importlib.metadata finds distributions there); plugin modules unloaded after."""
    monkeypatch.syspath_prepend(tmp_path)
    yield tmp_path
    for package in ("bm_plugin_demo", "bm_plugin_broken"):
        sys.modules.pop(package, None)


@pytest.fixture
def clean_registry(monkeypatch):
    """Whatever a test register()s is forgotten afterwards."""
    monkeypatch.setattr(modalities, "_registered", dict(modalities._registered))


def test_entry_point_plugin_is_listed_described_and_created(plugin_path):
    install_plugin(plugin_path, "bm_plugin_demo", "other-demo = bm_plugin_demo:DemoEncoder")
    assert "other-demo" in modalities.names()
    listed = {info.name: info for info in modalities.available()}
    assert listed["other-demo"].kind == "other" and listed["other-demo"].dim == 4
    assert modalities.info("other-demo").description.startswith("a third-party encoder")
    encoder = modalities.create("other-demo")
    assert encoder.name == "other-demo"
    assert encoder.encode(None) == pytest.approx(l2_normalise(np.arange(1, 5)))


def test_plugin_is_gone_when_its_distribution_is():
    assert "other-demo" not in modalities.names()


def test_entry_point_that_is_not_an_encoder_is_refused(plugin_path):
    install_plugin(plugin_path, "bm_plugin_broken", "other-broken = bm_plugin_broken:NotAnEncoder")
    assert "other-broken" in modalities.names()
    with pytest.raises(PluginError, match="not an Encoder subclass") as refused:
        modalities.create("other-broken")
    assert isinstance(refused.value, (BioMemError, TypeError))


def test_register_adds_an_encoder_class(clean_registry):
    @modalities.register
    class MineEncoder(Encoder):
        info = EncoderInfo("other-mine", "other", 2, 0.9, "made up by the test", "none", "MIT")

        def encode(self, image):
            return l2_normalise(np.array([3.0, 4.0]))

    assert MineEncoder.info.name == "other-mine"  # the decorator returns the class itself
    assert "other-mine" in modalities.names()
    assert modalities.info("other-mine").dim == 2
    assert modalities.create("other-mine").encode(None) == pytest.approx([0.6, 0.8])


def test_register_refuses_what_is_not_an_encoder_class(clean_registry):
    with pytest.raises(PluginError):
        modalities.register(object)
    with pytest.raises(TypeError):  # still a TypeError for code written before PluginError
        modalities.register(modalities.create("palm-compcode"))  # an instance, not a class


def test_unknown_name_is_a_typed_error_that_lists_the_available_ones():
    with pytest.raises(UnknownEncoderError) as unknown:
        modalities.create("face-nope")
    assert str(unknown.value).startswith("unknown encoder 'face-nope'; available: ")  # unquoted, unlike KeyError
    assert "face-dlib" in str(unknown.value) and "palm-compcode" in str(unknown.value)
    assert isinstance(unknown.value, (BioMemError, UnknownModalityError, KeyError))
    with pytest.raises(KeyError):
        modalities.info("face-nope")


def test_available_lists_builtins_without_importing_dlib():
    # A fresh interpreter: this test session may already have imported dlib.
    script = (
        "import sys, modalities\n"
        "listed = {i.name: i for i in modalities.available()}\n"
        "assert listed['face-dlib'].kind == 'face' and listed['face-dlib'].dim == 128\n"
        "assert listed['palm-compcode'].kind == 'palm' and listed['palm-compcode'].dim == 768\n"
        "assert 'dlib' not in sys.modules, 'listing encoders imported dlib'\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_plugin_without_an_availability_check_is_ready(plugin_path, clean_registry):
    install_plugin(plugin_path, "bm_plugin_demo", "other-demo = bm_plugin_demo:DemoEncoder")

    @modalities.register
    class MineEncoder(Encoder):
        info = EncoderInfo("other-mine", "other", 2, 0.9, "made up by the test", "none", "MIT")

        def encode(self, image):
            return l2_normalise(np.array([3.0, 4.0]))

    for name in ("other-demo", "other-mine"):
        found = modalities.availability(name)
        assert (found.name, found.ready, found.source) == (name, True, "none")
    assert {"other-demo", "other-mine"} <= {a.name for a in modalities.availability_all() if a.ready}


def test_plugins_that_cannot_load_or_check_are_not_ready_instead_of_raising(plugin_path, clean_registry):
    install_plugin(plugin_path, "bm_plugin_broken", "\n".join([
        "other-gone = bm_plugin_nowhere:Encoder",  # its module is not installed
        "other-broken = bm_plugin_broken:NotAnEncoder",
    ]))

    @modalities.register
    class FaultyEncoder(Encoder):
        info = EncoderInfo("other-faulty", "other", 2, 0.9, "made up by the test", "none", "MIT")

        @classmethod
        def availability(cls):
            raise RuntimeError("the check itself failed\nsecond line")

        def encode(self, image):
            return l2_normalise(np.array([3.0, 4.0]))

    found = {a.name: a for a in modalities.availability_all()}  # does not raise
    assert not found["other-gone"].ready
    assert found["other-gone"].reason == ("cannot load the encoder: ModuleNotFoundError: "
                                          "No module named 'bm_plugin_nowhere'")
    assert not found["other-broken"].ready and "PluginError" in found["other-broken"].reason
    assert found["other-faulty"].reason == "cannot load the encoder: RuntimeError: the check itself failed"
    assert found["face-dlib"].ready  # the others are unaffected
    with pytest.raises(UnknownEncoderError):
        modalities.availability("face-nope")
