"""The `biomem` command against one database file, as a user would type it."""

import json
import shutil
import subprocess
import sys

import pytest
from PIL import Image

import modalities
from biomem.cli import main


@pytest.fixture
def images(tmp_path, capture):
    """PNG files: two enrolment captures of Alice, a later capture of her, and a stranger."""
    paths = {}
    for name, (person, n) in {"alice1": (0, 0), "alice2": (0, 1), "alice_later": (0, 6),
                              "stranger": (3, 2), "bob1": (1, 0), "bob2": (1, 1), "bob_later": (1, 6)}.items():
        paths[name] = str(tmp_path / f"{name}.png")
        Image.fromarray(capture(person, n)).save(paths[name])
    return paths


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_enroll_add_ask_search_stats_forget(tmp_path, images, capsys):
    db = ["--db", str(tmp_path / "cli.db")]
    code, out, _ = run(capsys, *db, "enroll", "alice", images["alice1"], images["alice2"])
    assert code == 0 and "identity 1" in out
    code, out, _ = run(capsys, *db, "add", "My locker code is 5150", "--probe", images["alice_later"],
                       "--timestamp", "1:56 pm on 8 May, 2023")
    assert code == 0 and json.loads(out)["timestamp"] == "2023-05-08T13:56:00"
    assert run(capsys, *db, "add", "I take the 8:15 train", "--identity", "1")[0] == 0

    code, out, _ = run(capsys, *db, "ask", "What is my locker code?", "--probe", images["alice_later"])
    assert code == 0 and "gate: alice" in out and "5150" in out
    code, out, _ = run(capsys, *db, "ask", "What is my locker code?", "--probe", images["stranger"])
    assert code == 0 and "gate: no match" in out and "5150" not in out and "alice" not in out

    code, out, _ = run(capsys, *db, "search", "locker", "--probe", images["alice_later"], "-k", "1")
    result = json.loads(out)
    assert [r["memory"] for r in result["results"]] == ["My locker code is 5150"]
    assert result["gated_out"] == {"total": 0}

    code, out, _ = run(capsys, *db, "stats")
    stats = json.loads(out)
    assert stats["notes"] == 2 and stats["per_identity"] == {"1: alice": 2}

    code, _, err = run(capsys, *db, "forget", "--probe", images["stranger"])
    assert code == 2 and "StepUpRequiredError" in err
    code, out, _ = run(capsys, *db, "forget", "--probe", images["alice_later"])
    assert code == 0 and "forgot identity 1" in out
    assert json.loads(run(capsys, *db, "stats")[1])["notes"] == 0
    code, out, _ = run(capsys, *db, "enroll", "bob", images["alice1"])
    assert code == 0 and "identity 2" in out  # ids are never reused


def test_a_household_from_the_command_line(tmp_path, images, capsys):
    db = ["--db", str(tmp_path / "home.db")]
    assert run(capsys, *db, "enroll", "alice", images["alice1"], images["alice2"])[0] == 0
    assert run(capsys, *db, "enroll", "bob", images["bob1"], images["bob2"])[0] == 0
    code, out, _ = run(capsys, *db, "group", "create", "Home", "--probe", images["alice_later"])
    home = json.loads(out)
    assert code == 0 and home["member_labels"] == ["alice"]
    code, out, _ = run(capsys, *db, "group", "join", str(home["id"]), "--probe", images["alice_later"],
                       "--member-probe", images["bob_later"])
    assert code == 0 and json.loads(out)["member_labels"] == ["alice", "bob"]
    code, out, _ = run(capsys, *db, "add", "The Wi-Fi password is sunflower", "--probe", images["alice_later"],
                       "--scope", str(home["id"]), "--metadata", '{"room": "hall"}')
    assert code == 0 and json.loads(out)["scope"] == home["id"]
    code, out, _ = run(capsys, *db, "search", "wifi password", "--probe", images["bob_later"],
                       "--filters", '{"metadata.room": "hall"}')
    assert [r["memory"] for r in json.loads(out)["results"]] == ["The Wi-Fi password is sunflower"]
    code, out, _ = run(capsys, *db, "search", "wifi password", "--probe", images["stranger"])
    assert json.loads(out)["results"] == []
    code, _, err = run(capsys, *db, "search", "wifi", "--probe", images["bob_later"], "--filters", "{room")
    assert code == 2 and "InvalidInputError: not JSON" in err
    code, out, _ = run(capsys, *db, "group", "list", "--identity", "2")
    assert [g["label"] for g in json.loads(out)] == ["Home"]
    stats = json.loads(run(capsys, *db, "stats")[1])
    assert (stats["identities"], stats["groups"]) == (2, 1) and list(stats["per_group"]) == [f"{home['id']}: Home"]
    code, out, _ = run(capsys, *db, "group", "leave", str(home["id"]), "2", "--operator")
    assert code == 0 and json.loads(out)["members"] == [1]
    code, out, _ = run(capsys, *db, "search", "wifi password", "--probe", images["bob_later"])
    assert json.loads(out)["results"] == []


def test_typed_errors_are_one_line_and_exit_2(tmp_path, images, capsys):
    db = ["--db", str(tmp_path / "cli.db")]
    not_image = tmp_path / "readme.txt"
    not_image.write_text("hello")
    code, out, err = run(capsys, *db, "enroll", "bob", str(not_image))
    assert code == 2 and err.startswith("biomem: InvalidImageError:") and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, *db, "add", "hello", "--probe", images["stranger"])
    assert code == 2 and "UnknownIdentityError" in err
    code, _, err = run(capsys, *db, "forget", "--identity", "42")
    assert code == 2 and "UnknownIdentityError" in err


def test_a_misspelt_encoder_is_one_line_and_does_not_become_the_stores(tmp_path, images, capsys):
    db = ["--db", str(tmp_path / "typo.db")]
    code, _, err = run(capsys, *db, "--encoder", "face-arcfce", "enroll", "bob", images["alice1"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("biomem: UnknownEncoderError: unknown encoder 'face-arcfce'; available: ")
    code, out, _ = run(capsys, *db, "stats")
    assert code == 0 and json.loads(out)["default_modality"] == "face-arcface-s"


def test_console_script_is_installed():
    exe = shutil.which("biomem")
    assert exe, "pip install -e . puts the biomem command on PATH"
    help_text = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("enroll", "add", "ask", "search", "forget", "rekey", "stats", "demo"):
        assert command in help_text


def test_calibrate_prints_tau_plots_and_saves_it(tmp_path, capture, capsys):
    data = tmp_path / "faces"
    for person in range(3):
        folder = data / f"person{person}"
        folder.mkdir(parents=True)
        for n in range(3):
            Image.fromarray(capture(person, n)).save(folder / f"{n}.png")
    db = ["--db", str(tmp_path / "cal.db")]
    code, out, _ = run(capsys, *db, "calibrate", "--modality", "face-arcface-s", "--data", str(data),
                       "--plot", str(tmp_path / "hist.png"), "--save", "intersection")
    assert code == 0 and "EER" in out and "saved τ" in out
    assert (tmp_path / "hist.png").stat().st_size > 1000
    stats = json.loads(run(capsys, *db, "stats")[1])
    tau = stats["modalities"]["face-arcface-s"]
    # calibrated: between ArcFace's impostor (< 0.25) and genuine (> 0.6) scores, not the default
    assert tau != modalities.info("face-arcface-s").default_threshold and 0.25 < tau < 0.6
    # on a store with people enrolled, the table sizes the false-positive identification rate for its N ...
    home = ["--db", str(tmp_path / "home.db")]
    code, _, err = run(capsys, *home, "enroll", "Ana", str(data / "person0" / "0.png"), str(data / "person0" / "1.png"))
    assert code == 0, err
    code, out, _ = run(capsys, *home, "calibrate", "--modality", "face-arcface-s", "--data", str(data))
    assert code == 0 and "FPIR N=1 (store)" in out and "saved" not in out
    assert json.loads(run(capsys, *home, "stats")[1])["modalities"]["face-arcface-s"] == pytest.approx(
        modalities.info("face-arcface-s").default_threshold)  # without --save nothing is stored
    # ... and calibrating without --save against a store that is not there makes none
    code, out, _ = run(capsys, "--db", str(tmp_path / "none.db"), "calibrate", "--modality", "face-arcface-s",
                       "--data", str(data))
    assert code == 0 and "(store)" not in out and not (tmp_path / "none.db").exists()


def test_keys_create_tells_the_terminal_where_a_redirected_secret_went(tmp_path, capsys, monkeypatch):
    db = ["--db", str(tmp_path / "keys.db")]
    code, out, err = run(capsys, *db, "keys", "create", "kiosk")  # captured: stdout is not a terminal
    assert code == 0 and out.strip().startswith("bm_") and len(out.splitlines()) == 1  # the file holds the key only
    assert "shown only this once" in err and "written to standard output, which is not a terminal" in err
    assert out.strip() not in err
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # typed at a terminal: the key follows the line
    code, out, err = run(capsys, *db, "keys", "create", "desk")
    assert code == 0 and out.strip().startswith("bm_") and err.rstrip().endswith("shown only this once:")
