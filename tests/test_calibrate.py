"""Calibration of τ: the paper's density intersection, τ at a target FMR and the EER, checked
against analytic Gaussians, then end to end over a tiny image set with a colour "encoder"."""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text
from PIL import Image
from scipy.optimize import brentq
from scipy.stats import norm

import modalities
from biomem import BioMemory
from biomem.errors import InvalidInputError, NoFaceError
from biomem.identity.calibrate import CalibrationReport, calibrate_folder, calibrate_scores, save
from biomem.identity.calibration_plot import det_curve, figure, plot
from modalities.images import load_image

# Genuine ~ N(0.75, 0.05), impostor ~ N(0.45, 0.10): analytic EER at (μg σi + μi σg)/(σg + σi) = 0.65.
MU_G, SD_G, MU_I, SD_I = 0.75, 0.05, 0.45, 0.10
EER_TAU = (MU_G * SD_I + MU_I * SD_G) / (SD_G + SD_I)
EER = norm.cdf((EER_TAU - MU_G) / SD_G)


def fmr_of(impostor: np.ndarray, tau: float) -> float:
    return float(np.mean(impostor >= tau))


@pytest.fixture(scope="module")
def gaussian_scores() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.normal(MU_G, SD_G, 20_000), rng.normal(MU_I, SD_I, 50_000)


@pytest.fixture(scope="module")
def gaussian_report(gaussian_scores) -> CalibrationReport:
    return calibrate_scores(*gaussian_scores, fmr=1e-3)


# ---- calibrate_scores on known distributions ------------------------------------------------------------


def test_intersection_is_where_the_analytic_densities_cross(gaussian_report):
    crossing = brentq(lambda x: norm.pdf(x, MU_G, SD_G) - norm.pdf(x, MU_I, SD_I), MU_I, MU_G)
    assert gaussian_report.intersection.tau == pytest.approx(crossing, abs=0.01)
    assert gaussian_report.intersection.how.startswith("genuine and impostor KDE densities cross")
    assert gaussian_report.impostor_mode == pytest.approx(MU_I, abs=0.02)
    assert gaussian_report.genuine_mode == pytest.approx(MU_G, abs=0.01)


def test_eer_matches_the_analytic_eer(gaussian_report, gaussian_scores):
    genuine, impostor = gaussian_scores
    assert gaussian_report.eer == pytest.approx(EER, abs=0.003)
    assert gaussian_report.eer_threshold == pytest.approx(EER_TAU, abs=0.005)
    point = gaussian_report.at_eer
    assert point.fmr == pytest.approx(point.fnmr, abs=0.003)
    assert point.fmr == fmr_of(impostor, point.tau)
    assert point.fnmr == float(np.mean(genuine < point.tau))


def test_tau_at_fmr_is_the_smallest_tau_meeting_the_target(gaussian_report, gaussian_scores):
    _, impostor = gaussian_scores
    tau = gaussian_report.at_fmr.tau
    assert fmr_of(impostor, tau) <= 1e-3
    assert gaussian_report.at_fmr.fmr == fmr_of(impostor, tau)
    assert fmr_of(impostor, np.nextafter(tau, -np.inf)) > 1e-3  # any lower τ admits one impostor too many
    assert tau == pytest.approx(norm.ppf(1 - 1e-3, MU_I, SD_I), abs=0.015)
    assert gaussian_report.caveats == []  # 50,000 impostors resolve FMR steps of 2e-5


def test_the_security_tau_sits_above_the_paper_tau(gaussian_report):
    report = gaussian_report
    assert report.intersection.tau < report.at_fmr.tau
    assert report.intersection.fmr > report.target_fmr >= report.at_fmr.fmr
    assert report.intersection.fnmr < report.at_fmr.fnmr


def test_perfectly_separated_scores_take_the_midpoint_of_the_gap():
    rng = np.random.default_rng(1)
    genuine, impostor = rng.uniform(0.8, 0.95, 300), rng.uniform(-0.2, 0.5, 500)
    report = calibrate_scores(genuine, impostor, fmr=1e-3)
    assert report.intersection.tau == pytest.approx((impostor.max() + genuine.min()) / 2)
    assert "separated" in report.intersection.how
    assert report.eer == 0.0
    for point in (report.intersection, report.at_fmr, report.at_eer):
        assert (point.fmr, point.fnmr) == (0.0, 0.0)
    assert report.at_fmr.tau == np.nextafter(impostor.max(), np.inf)


def test_too_few_impostors_for_the_target_is_reported():
    rng = np.random.default_rng(2)
    report = calibrate_scores(rng.normal(0.9, 0.02, 100), rng.normal(0.3, 0.1, 500), fmr=1e-3)
    assert len(report.caveats) == 1 and "1/500" in report.caveats[0]
    assert report.at_fmr.false_matches == 0
    assert "caveat: only 500 impostor scores" in report.table()


@pytest.mark.parametrize("genuine, impostor, message", [
    ([0.9], [0.1, 0.2], "at least 2 genuine"),
    ([0.9, 0.95], [], "at least 2 genuine"),
    ([0.9, 0.9, 0.9], [0.1, 0.2], "all 3 genuine scores equal"),
    ([0.1, 0.15, 0.2], [0.8, 0.85, 0.9], "not above the impostor mode"),
    ([0.9, 1.5], [0.1, 0.2], "must lie in \\[-1, 1\\]"),
    ([0.9, float("nan")], [0.1, 0.2], "finite"),
])
def test_unusable_scores_raise_a_clear_error(genuine, impostor, message):
    with pytest.raises(InvalidInputError, match=message):
        calibrate_scores(genuine, impostor)


@pytest.mark.parametrize("fmr", [0.0, 1.0, -0.1])
def test_the_target_fmr_must_be_a_rate(fmr):
    with pytest.raises(InvalidInputError, match="target FMR"):
        calibrate_scores([0.9, 0.95], [0.1, 0.2], fmr=fmr)


def test_report_as_dict_table_and_plot(gaussian_report, tmp_path):
    data = gaussian_report.as_dict()
    assert "genuine_scores" not in data and data["intersection"]["tau"] == gaussian_report.intersection.tau
    assert data["at_fmr"]["fmr"] <= data["target_fmr"] == 1e-3
    table = gaussian_report.table()
    assert "| intersection (paper) |" in table and "| FMR ≤ 0.001 |" in table and "| EER = " in table
    path = plot(gaussian_report, tmp_path / "scores.png")
    assert path.stat().st_size > 1000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_det_curve_holds_every_operating_point_and_trades_fmr_for_fnmr(gaussian_report):
    report = gaussian_report
    fmr, fnmr, taus = det_curve(report)
    assert np.all(np.diff(taus) > 0) and np.all(np.diff(fmr) <= 0) and np.all(np.diff(fnmr) >= 0)
    assert (fmr[0], fnmr[0]) == (1.0, 0.0)  # the lowest score as τ admits everyone
    for point in (report.intersection, report.at_fmr):
        # The curve's rates at the largest curve τ not above the point's τ equal the point's own errors.
        at = np.searchsorted(taus, point.tau, side="right") - 1
        assert fmr[at] == pytest.approx(np.mean(report.impostor_scores >= taus[at]))
        assert fnmr[at] == pytest.approx(np.mean(report.genuine_scores < taus[at]))
        assert fmr[at] >= point.fmr and fnmr[at] <= point.fnmr


def drawn_labels(fig: Figure) -> list[Text]:
    """The non-empty texts a draw of `fig` puts on the picture (not the tick labels outside the view)."""
    with mock.patch.object(Text, "draw", autospec=True, side_effect=Text.draw) as draw:
        fig.canvas.draw()
    texts = dict.fromkeys(call.args[0] for call in draw.call_args_list)
    return [text for text in texts if text.get_visible() and text.get_text().strip()]


@pytest.mark.parametrize("scores", ["many", "few"])
def test_the_plot_s_labels_and_key_overlap_nothing(gaussian_report, scores):
    rng = np.random.default_rng(3)  # "few": a handful of people, its τ close together and its DET a corner
    report = gaussian_report if scores == "many" else calibrate_scores(rng.normal(0.7, 0.1, 9),
                                                                       rng.normal(0.3, 0.1, 27), fmr=1e-2)
    fig = figure(report)
    labels = drawn_labels(fig)
    renderer = fig.canvas.get_renderer()
    boxes = {text: text.get_window_extent(renderer) for text in labels}
    width, height = fig.canvas.get_width_height()
    assert all(0 <= box.x0 and box.x1 <= width and 0 <= box.y0 and box.y1 <= height for box in boxes.values())
    overlapping = [(a.get_text(), b.get_text()) for a, b in itertools.combinations(boxes, 2)
                   if boxes[a].overlaps(boxes[b])]
    assert overlapping == []
    keys = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert keys and any("τ intersection" in text.get_text() for key in keys for text in key.get_texts())
    for key in keys:  # the key covers no bar, τ line or DET point, and no axis label or title
        box = key.get_window_extent(renderer)
        assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)
        assert not any(box.overlaps(boxes[text]) for text in labels if text not in key.get_texts())


# ---- calibrate_folder with a colour "encoder" over generated images --------------------------------------


class MeanColourEncoder(modalities.Encoder):
    """Embeds an image's mean colour (centred on grey); a flat image is 'no face'."""

    info = modalities.EncoderInfo(name="test-colour", kind="other", dim=3, default_threshold=0.5,
                                  threshold_source="test", weights="none", license="test")

    def encode(self, image):
        pixels = load_image(image).reshape(-1, 3).astype(np.float32)
        if (pixels == pixels[0]).all():
            raise NoFaceError("blank image")
        return modalities.l2_normalise(pixels.mean(axis=0) - 127.5)


COLOURS = {"red": (200, 60, 60), "green": (60, 200, 60), "blue": (60, 60, 200)}
USABLE = {"red": 4, "green": 3, "blue": 2}  # images per identity the encoder accepts


def write_png(path, colour, rng) -> None:
    """A 32x32 capture: the identity's colour, shifted per image, with pixel noise."""
    base = np.array(colour) + rng.integers(-25, 26, 3)
    pixels = np.clip(base + rng.integers(-5, 6, (32, 32, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)


@pytest.fixture
def image_set(tmp_path):
    """DIR/<colour>/<n>.png, plus a blank image (refused), a corrupt one (refused) and a non-image (ignored)."""
    rng = np.random.default_rng(3)
    root = tmp_path / "data"
    for name, colour in COLOURS.items():
        (root / name).mkdir(parents=True)
        for n in range(USABLE[name]):
            write_png(root / name / f"{n}.png", colour, rng)
    Image.new("RGB", (32, 32), (200, 60, 60)).save(root / "red" / "blank.png")
    (root / "green" / "broken.png").write_bytes(b"not a png")
    (root / "blue" / "notes.txt").write_text("ignored: not an image suffix")
    return root


@pytest.fixture(scope="module")
def colour_encoder():
    return MeanColourEncoder()


def test_folder_counts_every_same_and_cross_identity_pair(image_set, colour_encoder):
    report = calibrate_folder(colour_encoder, image_set)
    assert report.genuine == 6 + 3 + 1  # C(4,2) + C(3,2) + C(2,2)
    assert report.impostor == report.impostor_total == 4 * 3 + 4 * 2 + 3 * 2
    assert (report.identities, report.images, report.modality) == (3, 9, "test-colour")
    assert report.intersection.fmr == report.intersection.fnmr == 0.0  # colours are far apart


def test_refused_images_are_reported_not_fatal(image_set, colour_encoder):
    report = calibrate_folder(colour_encoder, image_set)
    assert set(report.refused) == {"red/blank.png", "green/broken.png"}
    assert report.refused["red/blank.png"].startswith("NoFaceError")
    assert report.refused["green/broken.png"].startswith("InvalidImageError")
    assert "9 images encoded, 2 refused" in report.table()


def test_impostor_pairs_are_a_seeded_sample_above_the_cap(image_set, colour_encoder):
    first = calibrate_folder(colour_encoder, image_set, max_impostors=10, seed=5)
    again = calibrate_folder(colour_encoder, image_set, max_impostors=10, seed=5)
    assert (first.impostor, first.impostor_total) == (10, 26)
    assert np.array_equal(first.impostor_scores, again.impostor_scores)
    everything = calibrate_folder(colour_encoder, image_set)
    assert np.isin(first.impostor_scores, everything.impostor_scores).all()
    assert len(np.unique(first.impostor_scores)) == 10  # distinct pairs


def test_one_identity_gives_no_impostors_and_a_clear_error(image_set, colour_encoder):
    for name in ("green", "blue"):
        for f in (image_set / name).iterdir():
            f.unlink()
        (image_set / name).rmdir()
    with pytest.raises(InvalidInputError, match="got 6 and 0"):
        calibrate_folder(colour_encoder, image_set)


def test_a_folder_without_identities_is_refused(tmp_path, colour_encoder):
    with pytest.raises(InvalidInputError, match="no identity folders"):
        calibrate_folder(colour_encoder, tmp_path)
    with pytest.raises(InvalidInputError, match="not found"):
        calibrate_folder(colour_encoder, tmp_path / "missing")


PAIRS = """\
# path_a path_b same(1)/different(0), relative to the data folder
red/0.png red/1.png 1
red/2.png red/3.png 1
green/0.png green/2.png 1
"red/blank.png" red/1.png 1

red/0.png green/0.png 0
blue/1.png green/1.png 0   # a trailing comment
red/3.png blue/0.png 0
"""


def test_pairs_file_mode_scores_the_listed_pairs(image_set, colour_encoder, tmp_path):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(PAIRS)
    report = calibrate_folder(colour_encoder, image_set, pairs=pairs)
    assert (report.genuine, report.impostor, report.skipped_pairs) == (3, 3, 1)
    assert report.refused == {"red/blank.png": "NoFaceError: blank image"}
    assert report.images == 9 and report.identities is None and report.pairs_file == str(pairs)
    listed = colour_encoder.encode(image_set / "red/0.png") @ colour_encoder.encode(image_set / "green/0.png")
    assert np.isclose(report.impostor_scores, listed).sum() == 1


def test_a_malformed_pairs_line_names_its_line(image_set, colour_encoder, tmp_path):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("red/0.png red/1.png 1\nred/0.png green/0.png same\n")
    with pytest.raises(InvalidInputError, match=r"pairs.txt:2: expected"):
        calibrate_folder(colour_encoder, image_set, pairs=pairs)


# ---- save into a real store --------------------------------------------------------------------------------


def test_save_stores_tau_with_its_provenance(image_set, colour_encoder, text_encoder, tmp_path):
    report = calibrate_folder(colour_encoder, image_set)
    with BioMemory(tmp_path / "m.db", text_model=text_encoder, encoder=colour_encoder) as mem:
        assert save(report, mem, which="fmr") == report.at_fmr.tau
        assert mem.threshold("test-colour") == report.at_fmr.tau
        tau, source = mem.store.threshold("test-colour")
        assert tau == report.at_fmr.tau
        assert source.startswith("calibrate fmr: smallest τ with FMR <= 0.001")
        assert str(image_set) in source and "10 genuine / 26 impostor" in source and "2 refused" in source
        save(report, mem)  # the paper's rule replaces it
        assert mem.threshold() == report.intersection.tau
        assert mem.store.threshold("test-colour")[1].startswith("calibrate intersection")
        with pytest.raises(InvalidInputError, match="which must be one of"):
            save(report, mem, which="eer")
