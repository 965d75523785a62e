"""The result tables of docs/ say what benchmarks/results/*.json says: `python -m benchmarks.report --check` fails
when a marked table differs from the JSON, and `python -m benchmarks.report` writes it back."""

import json
import re
import shutil
from pathlib import Path

from benchmarks import report

ROOT = Path(__file__).resolve().parent.parent


def copy_of_the_repository(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copytree(ROOT / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    return tmp_path


def test_every_table_in_the_docs_matches_the_results(capsys):
    assert report.main(["--check"]) == 0, capsys.readouterr().out


def test_every_table_the_report_renders_is_in_a_page():
    marker = re.compile(r"<!-- results:([\w-]+) -->")
    used = {name for page in (ROOT / "docs").glob("*.md") for name in marker.findall(page.read_text())}
    assert used == set(report.TABLES)


def test_a_number_edited_by_hand_is_caught_and_rendering_restores_it(tmp_path, capsys):
    root = copy_of_the_repository(tmp_path)
    page = root / "docs" / "gate-speed.md"
    original = page.read_text()
    edited = original.replace("**0.83 / 1.15 ms**", "**0.79 / 1.15 ms**", 1)
    assert edited != original
    page.write_text(edited)

    assert report.main(["--check", "--root", str(root)]) == 1
    assert "docs/gate-speed.md: gate_screen" in capsys.readouterr().out
    assert page.read_text() == edited  # --check changes nothing

    assert report.main(["--root", str(root)]) == 0
    assert page.read_text() == original
    assert report.main(["--check", "--root", str(root)]) == 0


def test_a_changed_result_is_caught_and_rendered_into_its_table(tmp_path, capsys):
    root = copy_of_the_repository(tmp_path)
    results = root / "benchmarks" / "results" / "kiosk.json"
    data = json.loads(results.read_text())
    data["rows"][0]["owner_served"] = 19
    data["rows"][0]["owner_refused"] = 1
    results.write_text(json.dumps(data))

    assert report.main(["--check", "--root", str(root)]) == 1
    assert "docs/gate-limits.md: kiosk" in capsys.readouterr().out

    assert report.main(["--root", str(root)]) == 0
    page = (root / "docs" / "gate-limits.md").read_text()
    assert "| crowd (every 2 s) | 300 | 0 | 0 | 20 | 19 | 1 | nobody |" in page
