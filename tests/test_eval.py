"""`biomem eval locomo`: metrics on hand-checked examples, LoCoMo parsing, and a reduced run end to end."""

import argparse
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from biomem.cli import main
from biomem.errors import InvalidInputError
from biomem.eval import add_locomo_arguments
from biomem.eval import locomo as lc
from biomem.eval.biosources import load_source, non_owner
from biomem.eval.metrics import (
    amem_bleu1,
    amem_f1,
    evidence_recall,
    locomo_f1,
    normalize_answer,
)
from biomem.eval.protocols import NOT_MENTIONED_OPTION, AMemProtocol, Asker, PaperProtocol
from biomem.notes.llm import OfflineLLM
from biomem.stores.records import Note
from biomem.stores.sqlite import Store

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"
needs_data = pytest.mark.skipif(not DATA.is_file(), reason=f"LoCoMo not at {DATA}")


# ---- A-Mem's F1 and BLEU-1 ---------------------------------------------------------------------

def test_amem_f1_is_over_token_sets_with_dots_commas_and_marks_dropped():
    assert amem_f1("The cat sat.", "the cat") == pytest.approx(0.8)  # P 2/3, R 1
    assert amem_f1("Paris!", "paris") == 1.0
    assert amem_f1("yes yes yes", "yes") == 1.0  # sets: repeats do not count
    assert amem_f1("New York", "Boston") == 0.0


def test_amem_metrics_score_an_empty_prediction_or_reference_zero():
    for prediction, reference in (("", "Paris"), (None, "Paris"), ("Paris", ""), ("Paris", None), ("   ", "x")):
        assert amem_f1(prediction, reference) == 0.0
        assert amem_bleu1(prediction, reference) == 0.0


def test_amem_metrics_convert_integer_answers_with_str():
    assert amem_f1("2022", 2022) == 1.0
    assert amem_bleu1("2022", 2022) == 1.0
    assert amem_f1("in 2022", 2022) == pytest.approx(2 / 3)  # P 1/2, R 1


def test_amem_bleu1_is_nltk_unigram_bleu_with_brevity_penalty():
    assert amem_bleu1("the cat", "the cat sat on the mat") == pytest.approx(math.exp(1 - 6 / 2))
    assert amem_bleu1("Paris.", "paris") == pytest.approx(0.5)  # nltk keeps the period as a token
    assert amem_bleu1("a b", "c d") == 0.0  # no unigram match: 0 even with smoothing


# ---- the official LoCoMo F1 -------------------------------------------------------------------

def test_locomo_normalize_drops_commas_punctuation_and_articles():
    assert normalize_answer("The Cat, and a dog!") == "cat dog"


def test_locomo_f1_stems_and_counts_repeated_tokens():
    assert locomo_f1("running dogs", "the dog runs", 4) == 1.0
    assert locomo_f1("dog dog", "dog", 4) == pytest.approx(2 / 3)  # Counter overlap: P 1/2, R 1


def test_locomo_f1_multi_hop_averages_the_best_part_per_gold_part():
    assert locomo_f1("London", "London, Berlin", 1) == pytest.approx(0.5)
    assert locomo_f1("Berlin, London", "London, Berlin", 1) == 1.0
    assert locomo_f1("London", "London, Berlin", 4) == pytest.approx(2 / 3)


def test_locomo_f1_adversarial_rewards_saying_it_is_not_mentioned():
    assert locomo_f1("Not mentioned in the conversation", "anything", 5) == 1.0
    assert locomo_f1("No information available", None, 5) == 1.0
    assert locomo_f1("She went to Paris", "Paris", 5) == 0.0


def test_evidence_recall_names_turns_with_their_conversation():
    evidence = [("conv-1", "D1:1"), ("conv-1", "D1:2")]
    assert evidence_recall(evidence, [("conv-1", "D1:2"), ("conv-2", "D1:1")]) == 0.5
    assert evidence_recall([], [("conv-1", "D1:1")]) is None


# ---- data ---------------------------------------------------------------------------------------

@needs_data
def test_load_locomo_turns_notes_dates_and_evidence():
    conversations = lc.load_locomo(DATA)
    assert len(conversations) == 10
    assert sum(len(c.turns) for c in conversations) == 5882
    first = conversations[0].turns[0]
    paper, amem = PaperProtocol(10, 0, "question"), AMemProtocol(10, 10, "keywords", 0, {})
    assert (first.dia_id, paper.note(first), first.date) == (
        "D1:1", "Caroline: Hey Mel! Good to see you! How have you been?", "1:56 pm on 8 May, 2023")
    assert amem.note(first) == "Speaker Carolinesays : Hey Mel! Good to see you! How have you been?"  # A-Mem's
    photo = next(t for t in conversations[0].turns if t.dia_id == "D1:5")
    assert paper.note(photo).startswith("Caroline: [Image: a photo of a dog walking past a wall")
    assert amem.note(photo).startswith("Speaker Carolinesays : [Image: a photo of a dog walking past a wall")
    questions = [q for c in conversations for q in c.questions]
    assert [sum(q.category == k for q in questions) for k in (1, 2, 3, 4, 5)] == [282, 321, 96, 841, 446]
    adversarial = [q for q in questions if q.category == 5]
    assert all(q.adversarial for q in adversarial)
    assert all(q.adversarial is None for q in questions if q.category != 5)
    conv43 = {q.evidence for q in conversations[4].questions}
    assert any("D11:26" in e for e in conv43)  # the data's "D:11:26"


@needs_data
def test_sample_is_stratified_seeded_and_stable():
    questions = [q for c in lc.load_locomo(DATA) for q in c.questions]
    sample = lc.sample_questions(questions, 0.1, seed=0, categories=(1, 2, 4))
    assert [sum(q.category == k for q in sample) for k in (1, 2, 4)] == [28, 32, 84]
    assert sample == lc.sample_questions(questions, 0.1, seed=0, categories=(1, 2, 4))
    assert sample != lc.sample_questions(questions, 0.1, seed=1, categories=(1, 2, 4))
    assert all(q.category in (1, 2, 4) for q in lc.sample_questions(questions, 1.0, seed=0, categories=(1, 2, 4)))
    every = lc.sample_questions(questions, 0.1, seed=0, categories=(1, 2, 3, 4, 5))
    assert [sum(q.category == k for q in every) for k in (1, 2, 3, 4, 5)] == [28, 32, 10, 84, 45]


@needs_data
def test_trim_keeps_questions_whose_evidence_was_ingested():
    conversation = lc.trim(lc.load_locomo(DATA)[0], 30)
    kept = {t.dia_id for t in conversation.turns}
    assert len(kept) == 30 and conversation.questions
    assert all(q.evidence and set(q.evidence) <= kept for q in conversation.questions)


def test_missing_data_is_downloaded_or_refused_with_a_clear_error(tmp_path):
    target = tmp_path / "locomo10.json"
    with pytest.raises(lc.DataUnavailableError, match="fetch locomo10.json by hand and pass --data"):
        lc.ensure_data(target, url="http://127.0.0.1:9/locomo10.json")  # nothing listens: offline
    assert not target.exists() and not list(tmp_path.iterdir())
    target.write_text("[]")
    assert lc.ensure_data(target, url="http://127.0.0.1:9/never-fetched") == target


# ---- biometric sources --------------------------------------------------------------------------

def test_faces_refuse_more_conversations_than_sample_people():
    with pytest.raises(InvalidInputError, match="16 distinct people"):
        load_source("faces", 17)


def test_unknown_source_and_non_owner_rule():
    with pytest.raises(InvalidInputError, match="unknown --bio"):
        load_source("iris", 2)
    assert [non_owner(i, 10) for i in (0, 8, 9)] == [1, 9, 0]


def test_embeddings_source_splits_gallery_and_probe_and_calibrates_tau(tmp_path):
    path = _embeddings(tmp_path, people=3, captures=3)
    bio = load_source(f"embeddings:{path}", 2)
    assert [len(g) for g in bio.galleries] == [2, 2] and len(bio.probes) == 2
    assert bio.modality == "embeddings:emb" and "density intersection" in bio.tau_source
    assert -1.0 < bio.tau < 1.0
    assert load_source(f"embeddings:{path}", 2, tau=0.5).tau == 0.5


def _embeddings(folder: Path, people: int, captures: int, tau: float | None = None) -> Path:
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((people, 32))
    rows = [c + 0.15 * rng.standard_normal(32) for c in centres for _ in range(captures)]
    labels = [f"person{p}" for p in range(people) for _ in range(captures)]
    extra = {"tau": np.float32(tau)} if tau is not None else {}
    path = folder / "emb.npz"
    np.savez(path, embeddings=np.asarray(rows, np.float32), labels=np.asarray(labels), **extra)
    return path


# ---- A-Mem's protocol --------------------------------------------------------------------------

def _amem_note(note_id: int, content: str, **fields) -> Note:
    return Note(id=note_id, owner=1, content=content, timestamp="2023-05-08T13:56:00",
                keywords=fields.get("keywords", ["hey"]), tags=fields.get("tags", ["greeting"]),
                context=fields.get("context", "A greeting."))


def test_amem_context_is_its_find_related_memories_raw_with_locomo_dates():
    amem = AMemProtocol(10, 10, "keywords", 0, {("conv-26", "D1:1"): "1:56 pm on 8 May, 2023"})
    asker = Asker(mem=None, bio=None, owners=[1], labels={1: "conv-26"}, dia_ids={5: "D1:1", 6: "D1:2"},
                     protocol=amem)
    hit, linked = _amem_note(5, "Speaker Carolinesays : Hey Mel!"), _amem_note(6, "Speaker Melaniesays : Hi!")
    assert amem.context(asker, [hit], [(linked, 5)]) == (
        "talk start time:1:56 pm on 8 May, 2023memory content: Speaker Carolinesays : Hey Mel!"
        "memory context: A greeting.memory keywords: ['hey']memory tags: ['greeting']\n"
        "talk start time:2023-05-08T13:56:00memory content: Speaker Melaniesays : Hi!"  # no date known: stored one
        "memory context: A greeting.memory keywords: ['hey']memory tags: ['greeting']\n")


def test_protocols_default_to_their_own_query_and_links_and_record_overrides():
    paper, amem = lc.make_protocol("paper", 10, 0, {}), lc.make_protocol("amem", 10, 0, {})
    assert (paper.query, paper.links, amem.query, amem.links) == ("question", 0, "keywords", 10)
    ablation = lc.make_protocol("paper", 10, 0, {}, links=3, query="keywords")
    assert ablation.config()["links"] == "up to 3 linked notes per hit" and "keywords" in ablation.config()["query"]
    with pytest.raises(InvalidInputError):
        lc.make_protocol("amem", 10, 0, {}, query="embedding")
    with pytest.raises(InvalidInputError):
        lc.make_protocol("mem0", 10, 0, {})


@needs_data
def test_amem_adversarial_options_are_seeded_per_question_and_scored_against_the_distractor(text_encoder):
    questions = [q for c in lc.load_locomo(DATA) for q in c.questions if q.category == 5]
    amem = AMemProtocol(10, 10, "keywords", 0, {})
    orders = [amem.options(q) for q in questions[:40]]
    assert orders == [AMemProtocol(10, 10, "keywords", 0, {}).options(q) for q in questions[:40]]
    assert {first == NOT_MENTIONED_OPTION for first, _ in orders} == {True, False}
    assert all(set(pair) == {NOT_MENTIONED_OPTION, q.adversarial} for pair, q in zip(orders, questions))
    assert amem.reference(questions[0]) == questions[0].adversarial
    offline = OfflineLLM(text_encoder)
    assert amem._offline(offline, questions[0], []) == NOT_MENTIONED_OPTION  # nothing retrieved
    unrelated = [_amem_note(1, "The weather in Lisbon was sunny all week.")]
    assert amem._offline(offline, questions[0], unrelated) == NOT_MENTIONED_OPTION  # abstains


# ---- end to end ---------------------------------------------------------------------------------

def _run(tmp_path: Path, text_encoder, *options: str) -> dict:
    parser = argparse.ArgumentParser()
    add_locomo_arguments(parser)
    argv = ["--data", str(DATA), "--conversations", "2", "--max-turns", "30", "--sample", "0.3",
            "--cache-dir", str(tmp_path / "cache"), *options]
    args = parser.parse_args(argv)
    args.command_line = "biomem eval locomo " + " ".join(argv)
    return lc.run(args, text=text_encoder)


@needs_data
@pytest.mark.slow
def test_reduced_protocol_end_to_end(tmp_path, text_encoder):
    out = tmp_path / "palm"
    results = _run(tmp_path, text_encoder, "--bio", "palmsynth", "--out", str(out))
    summary, records = results["summary"], results["records"]
    questions = results["config"]["questions"]
    assert 3 <= questions <= 10 and len(records) == 4 * questions
    assert summary["gate"]["tar"] == 1.0 and summary["gate"]["far"] == 0.0
    gated, ungated = summary["gated"], summary["ungated"]
    assert gated["owner"]["recall"] > 0 and gated["non-owner"]["recall"] == 0
    assert gated["owner"]["leaked"] == gated["non-owner"]["leaked"] == 0
    assert ungated["non-owner"]["leaked"] > 0
    assert gated["owner"]["context_notes"] == 10 and gated["owner"]["prompt_tokens"] > 100
    record = records[0]
    assert {"question", "category", "probe_identity", "gate", "retrieved", "answer", "scores"} <= set(record)
    assert all(r["owner"] == record["probe_identity"] for r in record["retrieved"])

    # The ungated baseline is a global top-K by cosine over every note of every owner.
    store = Store(Path(results["config"]["cache_dir"]) / results["config"]["cache_key"] / "store.db")
    ids, vectors = zip(*[store.note_vectors(i.id)[:2] for i in store.identities()])
    ids, vectors = np.concatenate(ids), np.concatenate(vectors)
    store.close()
    for r in (r for r in records if r["mode"] == "ungated"):
        query = text_encoder.encode_one(r["question"])
        assert {n["note"] for n in r["retrieved"]} == set(ids[np.argsort(-(vectors @ query))[:10]].tolist())

    table = (out / "results.md").read_text()
    assert "| Dataset | Probe | Multi-Hop | Temporal | Single-Hop | Average (macro) | Avg. Gap |" in table
    assert (out / "chart.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "records.json").read_text())["records"] == json.loads(json.dumps(records, default=str))
    assert results["timings"]["ingest_cached"] is False

    # Another biometric source reuses the cached ingestion and asks the same sampled questions.
    other = _run(tmp_path, text_encoder, "--bio", f"embeddings:{_embeddings(tmp_path, 2, 3, tau=0.8)}",
                 "--out", str(tmp_path / "emb"))
    assert other["timings"]["ingest_cached"] is True
    assert other["config"]["cache_key"] == results["config"]["cache_key"]
    assert [(r["conversation"], r["qa_index"]) for r in other["records"]] == \
        [(r["conversation"], r["qa_index"]) for r in records]
    assert other["summary"]["gated"]["non-owner"]["leaked"] == 0


@needs_data
@pytest.mark.slow
def test_reduced_amem_protocol_end_to_end(tmp_path, text_encoder):
    results = _run(tmp_path, text_encoder, "--bio", "palmsynth", "--protocol", "amem", "--out", str(tmp_path / "a"))
    config, summary, records = results["config"], results["summary"], results["records"]
    assert (config["protocol"], config["categories"], config["average"]) == ("amem", [1, 2, 3, 4, 5],
                                                                             "micro over questions")
    assert config["links"] == "up to 10 linked notes per hit" and "keywords" in config["query"]
    owner = [r for r in records if r["mode"] == "gated" and r["role"] == "owner"]
    mean_f1 = 100 * np.mean([r["scores"]["f1"] for r in owner])
    assert summary["gated"]["owner"]["average"]["f1"] == pytest.approx(mean_f1)
    assert summary["gated"]["owner"]["recall_linked"] >= summary["gated"]["owner"]["recall"]
    assert any(r["linked"] for r in owner)  # A-Mem's links were followed
    assert summary["gated"]["owner"]["context_notes"] > 10  # 10 hits and their linked notes
    assert all(r["scores"]["prompt_tokens"] > 0 for r in owner)
    for r in (r for r in records if r["mode"] == "gated"):
        assert all(n["owner"] == r["probe_identity"] for n in r["retrieved"] + r["linked"])
        assert {n["via"] for n in r["linked"]} <= {n["note"] for n in r["retrieved"]}
    assert summary["gated"]["non-owner"]["leaked"] == 0 and summary["ungated"]["non-owner"]["leaked"] > 0
    store = Store(Path(config["cache_dir"]) / config["cache_key"] / "store.db")
    contents = [n.content for i in store.identities() for n in store.all_notes(i.id)]
    store.close()
    assert contents and all(re.fullmatch(r"Speaker \w+says : .+", c, re.S) for c in contents)
    assert "Average (micro)" in (tmp_path / "a" / "results.md").read_text()


@needs_data
def test_cli_reports_a_bad_biometric_source_in_one_line(tmp_path, capsys):
    assert main(["eval", "locomo", "--data", str(DATA), "--bio", "faces:extra", "--cache-dir", str(tmp_path)]) == 2
    assert "unknown --bio 'faces:extra'" in capsys.readouterr().err


# ---- households: the two speakers of a conversation share it as a group ----------------------------------

@needs_data
def test_households_check_both_speakers_retrieve_their_conversation_and_nobody_else_does(tmp_path, text_encoder):
    from biomem.eval import add_households_arguments
    from biomem.eval import households as hh
    from biomem.eval.protocols import PaperProtocol

    parser = argparse.ArgumentParser()
    add_households_arguments(parser)
    argv = ["--data", str(DATA), "--conversations", "2", "--max-turns", "30", "--sample", "0.5",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    args = parser.parse_args(argv)
    args.command_line = "biomem eval households " + " ".join(argv)
    results = hh.run(args, text=text_encoder)
    rows, summary = results["summary"]["rows"], results["summary"]
    questions = results["config"]["questions"]
    assert questions >= 3 and len(results["records"]) == 6 * questions  # 2 roles single, 4 households
    owner = rows["single/owner"]["recall"]
    assert owner > 0
    for role in ("speaker A", "speaker B"):  # the same notes, ranked the same: the single owner's recall
        assert rows[f"households/{role}"]["recall"] == owner
        assert summary["same_top_k_as_single_owner"][role] == 1.0
    for key in ("single/non-owner", "households/non-member A", "households/non-member B"):
        assert rows[key]["recall"] == 0.0 and rows[key]["of_the_question_conversation"] == 0
    assert all(row["leaked"] == 0 and row["retrieved"] == 10 * questions for row in rows.values())
    for gate in summary["gate"].values():
        assert gate["tar"] == 1.0 and gate["false_accept_pairs"] == 0
    assert len(summary["gate"]["households"]["probes"]) == 4

    # The household store: two groups of the conversation's two speakers own every turn; no person owns a note.
    store = Store(Path(results["config"]["cache_dir"]) / results["config"]["cache_keys"]["households"] / "store.db")
    groups = store.all_groups()
    assert [(g.label, g.member_labels) for g in groups] == [
        ("conv-26", ["conv-26: Caroline", "conv-26: Melanie"]), ("conv-30", ["conv-30: Gina", "conv-30: Jon"])]
    assert all(not store.all_notes(i.id) for i in store.identities())
    notes = [n for g in groups for n in store.all_notes(g.id)]
    store.close()
    assert len(notes) == 60 and all(n.author is None for n in notes)
    assert "| household: the two speakers' group | speaker A |" in (tmp_path / "out" / "results.md").read_text()

    # The single-owner store is the one `biomem eval locomo` caches: the same key, reused.
    conversations = [lc.trim(c, 30) for c in lc.load_locomo(DATA)[:2]]
    again = lc.ingest(conversations, data_sha256=lc.file_sha256(DATA), cache_dir=tmp_path / "cache",
                      text=text_encoder, llm="offline", max_turns=30, protocol=PaperProtocol(10, 0, "question"))
    assert again.cached and again.key == results["config"]["cache_keys"]["single"]
