"""benchmarks/peers.py without the peers: every peer not installed prints the line that says so, and Bio-Memory's
row (SQLite) is right on a small rung: recall@10 1.0 from a probe, and another person's or a stranger's probe
reads, changes and deletes nothing of someone else's."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import peers  # noqa: E402  (benchmarks/peers.py)


def test_bio_memory_row_and_skipped_peers(tmp_path, capsys):
    out = tmp_path / "peers.json"
    names = [p for p in peers.PEERS if p != "pgvector"]  # pgvector needs the PostgreSQL server: --no-postgres
    assert peers.main(["--rungs", "1000:10", "--queries", "10", "--shape", "1x128", "--no-postgres",
                       "--peers", ",".join(names), "--workdir", str(tmp_path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    missing = [p for p in names if importlib.util.find_spec(peers.MODULE[p]) is None]
    for name in missing:
        assert f"{name}: skipped, {peers.DISTRIBUTION[name]} is not installed" in printed

    results = json.loads(out.read_text())
    rung = results["rungs"][0]
    assert set(rung["skipped"]) == set(missing)
    row = rung["systems"]["biomem-sqlite"]
    assert row["recall_at_10"] == 1.0 and row["search"]["n"] == 10 and row["load_notes_per_s"] > 0
    safety = rung["safety"]["biomem-sqlite"]
    assert {c: safety[c]["result"] for c in peers.SAFETY} == {
        "get": "no", "update": "no", "delete": "no", "history": "no", "search_other_user": "no",
        "search_unknown_user": "empty", "search_no_user": "error"}
    assert "Synthetic memory 0 of person 0" in safety["update"]["saw"]  # the owner's note is intact
    assert "| biomem-sqlite | no | no | no | no | no | empty | error |" in printed
    assert results["machine"]["cores"]
