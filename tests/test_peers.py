"""benchmarks/peers.py without the peers: every peer not installed prints the line that says so, and Bio-Memory's
row (SQLite) is right on a small rung: recall@10 1.0 from a probe, and another person's or a stranger's probe
reads, changes and deletes nothing of someone else's."""

import argparse
import importlib.util
import json

import pytest

from benchmarks import peers


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

    # after the gate: a session per person, the same store, the same notes, and no way into another's
    session = rung["systems"]["biomem-sqlite-session"]
    assert session["recall_at_10"] == 1.0 and session["search"]["n"] == 10 and session["store_of"] == "biomem-sqlite"
    assert {c: r["result"] for c, r in rung["safety"]["biomem-sqlite-session"].items()} == {
        "get": "no", "update": "no", "delete": "no", "history": "no", "search_other_user": "no",
        "search_unknown_user": "error", "search_no_user": "error"}


def test_budgets_cut_a_slow_lane_and_name_the_peer(tmp_path):
    assert peers.parse_budget("900,mem0=300") == {"": 900.0, "mem0": 300.0}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown peers"):
        peers.parse_budget("900,weaviate=300")
    out = tmp_path / "peers.json"
    assert peers.main(["--rungs", "500:5", "--queries", "6", "--shape", "1x128", "--no-postgres", "--peers", "",
                       "--search-budget", "0", "--workdir", str(tmp_path), "--out", str(out)]) == 0
    systems = json.loads(out.read_text())["rungs"][0]["systems"]
    assert {s["search"]["n"] for s in systems.values()} == {1}  # past its budget, a lane takes no more queries
