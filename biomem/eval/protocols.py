"""How LoCoMo is turned into notes and asked: the seed paper's protocol, or A-Mem's own evaluation.

`paper` (the default) is the Bio-Memory paper's: categories 1, 2 and 4, turns stored as
"Speaker: text", the raw question as the query, no links followed, notes shown oldest first
in this engine's answer prompt, a macro average over the three categories.

`amem` reproduces the choices of A-Mem's LoCoMo evaluation (WujiangXu/AgenticMemory
test_advanced.py and memory_layer.py at 7f716dc, with the per-hit link cap of WujiangXu/A-mem
5b345e6), inside each owner's partition: turns stored as "Speaker Xsays : text" (sic, no
space), the LLM's query keywords as the query, each hit followed by its linked notes (up to
k per hit) in rank order, serialized as A-Mem does with LoCoMo's own date strings, all five
categories with A-Mem's per-category answer prompts (the adversarial one as a two-choice
question), its JSON answer call at temperature 0.7 (0.5 for adversarial questions), and a
micro average over every question. As in A-Mem, an adversarial question is scored against
LoCoMo's `adversarial_answer`, the distractor option.

The query and the links followed can be changed in either protocol (`--query`, `--links`), to
measure what each choice does on its own.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from biomem.engine.results import Answer
from biomem.errors import InvalidInputError
from biomem.notes.llm import ChatLLM, OfflineLLM
from biomem.stores.records import Note

from .biosources import BioSet, non_owner
from .locomo_data import Question, Turn
from .metrics import (
    ADVERSARIAL,
    ALL_CATEGORY_NAMES,
    CATEGORY_NAMES,
    TEMPORAL,
    amem_bleu1,
    amem_f1,
    evidence_recall,
    locomo_f1,
)

NOT_MENTIONED_OPTION = "Not mentioned in the conversation"  # A-Mem's second adversarial option
AMEM_ANSWER_PROMPT = """Based on the context: {context}, write an answer in the form of a short phrase for the following question. Answer with exact words from the context whenever possible.

Question: {question} Short answer:"""  # noqa: E501 - A-Mem's prompt, word for word
AMEM_TEMPORAL_PROMPT = """Based on the context: {context}, answer the following question. Use DATE of CONVERSATION to answer with an approximate date.
Please generate the shortest possible answer, using words from the conversation where possible, and avoid using any subjects.

Question: {question} Short answer:"""  # noqa: E501 - A-Mem's prompt, word for word
AMEM_ADVERSARIAL_PROMPT = """Based on the context: {context}, answer the following question. {question}

Select the correct answer: {first} or {second}  Short answer:"""
AMEM_TEMPERATURE, AMEM_ADVERSARIAL_TEMPERATURE = 0.7, 0.5


class Protocol(ABC):
    """What a LoCoMo run stores per turn, which questions it asks, how, and how it averages."""

    name: str
    categories: dict[int, str]
    average: str  # "macro" (over categories) or "micro" (over questions)
    note_format: int | str  # part of the ingestion cache key: change it when note() changes

    def __init__(self, k: int, links: int, query: str) -> None:
        """`links`: linked notes followed per hit; `query`: "question" or "keywords" (the LLM's, once per question)."""
        if query not in ("question", "keywords"):
            raise InvalidInputError(f"--query is question or keywords, not {query!r}")
        self.k, self.links, self.query = k, links, query
        self._keywords: dict[str, str] = {}

    def retrieval_query(self, mem: Any, question: str) -> str:
        """What retrieval embeds: the question, or the LLM's query keywords for it (asked once per run)."""
        if self.query == "question":
            return question
        if question not in self._keywords:
            self._keywords[question] = mem.llm.query_keywords(question)
        return self._keywords[question]

    def settings(self) -> dict[str, Any]:
        return {"query": "the question" if self.query == "question" else
                "the LLM's query keywords (A-Mem's prompt), asked once per question",
                "links": f"up to {self.links} linked notes per hit" if self.links else "not followed"}

    @abstractmethod
    def note(self, turn: Turn) -> str:
        """The note stored for one turn."""

    def reference(self, question: Question) -> Any:
        """The gold answer a prediction is scored against."""
        return question.answer

    @abstractmethod
    def ask(self, asker: Asker, question: Question, probe: Any, policy: str | None) -> Answer:
        """One gated (or, with policy "all" at τ -1, ungated) answer from `asker`'s store."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """Every choice of the protocol, for the run's JSON."""


class PaperProtocol(Protocol):
    """The seed paper's protocol: the engine's own `ask`."""

    name, categories, average, note_format = "paper", CATEGORY_NAMES, "macro", 1

    def note(self, turn: Turn) -> str:
        return turn.note

    def ask(self, asker: Asker, question: Question, probe: Any, policy: str | None) -> Answer:
        query = self.retrieval_query(asker.mem, question.question)
        return asker.mem.ask(question.question, probe=probe, k=self.k, links=self.links, query=query,
                             temporal=question.category == TEMPORAL, policy=policy)

    def config(self) -> dict[str, Any]:
        return {"protocol": "paper", "categories": list(self.categories), "average": "macro over categories",
                "turn_text": "Speaker: text", "dates": "ISO 8601 in the prompt", **self.settings(),
                "context_order": "oldest first, linked notes among them",
                "answer_call": "the engine's ask: A-Mem's short-answer prompts plus one abstention sentence, "
                               "plain text, temperature 0"}


class AMemProtocol(Protocol):
    """A-Mem's evaluation choices (see the module docstring), inside the owner's partition."""

    name, categories, average, note_format = "amem", ALL_CATEGORY_NAMES, "micro", "amem-1"

    def __init__(self, k: int, links: int, query: str, seed: int, dates: Mapping[tuple[str, str], str]) -> None:
        """`dates`: LoCoMo's session date string of each turn, by (sample_id, dia_id)."""
        super().__init__(k, links, query)
        self.seed, self.dates = seed, dates

    def note(self, turn: Turn) -> str:
        text = f"[Image: {turn.caption}] {turn.text}" if turn.caption else turn.text
        return f"Speaker {turn.speaker}says : {text}"

    def reference(self, question: Question) -> Any:
        return question.adversarial if question.category == ADVERSARIAL else question.answer

    def options(self, question: Question) -> tuple[str, str]:
        """The adversarial question's two options, in an order seeded per question (A-Mem: unseeded)."""
        pair = [NOT_MENTIONED_OPTION, str(question.adversarial)]
        random.Random(f"{self.seed}:{question.conversation}:{question.index}").shuffle(pair)
        return pair[0], pair[1]

    def context(self, asker: Asker, hits: list[Note], linked: list[tuple[Note, int]]) -> str:
        """A-Mem's find_related_memories_raw: each hit, then the notes it links to, one line each."""
        lines = []
        for hit in hits:
            for note in [hit, *(n for n, via in linked if via == hit.id)]:
                date = self.dates.get(asker.turns([note])[0], note.timestamp)
                lines.append(f"talk start time:{date}memory content: {note.content}"
                             f"memory context: {note.context}memory keywords: {note.keywords!s}"
                             f"memory tags: {note.tags!s}\n")
        return "".join(lines)

    def ask(self, asker: Asker, question: Question, probe: Any, policy: str | None) -> Answer:
        mem = asker.mem
        result = mem.search(self.retrieval_query(mem, question.question), probe=probe, k=self.k,
                            links=self.links, policy=policy)
        hits = [note for note, _ in result.notes]
        context = self.context(asker, hits, result.linked)
        adversarial = question.category == ADVERSARIAL
        if adversarial:
            first, second = self.options(question)
            prompt = AMEM_ADVERSARIAL_PROMPT.format(context=context, question=question.question,
                                                    first=first, second=second)
        else:
            template = AMEM_TEMPORAL_PROMPT if question.category == TEMPORAL else AMEM_ANSWER_PROMPT
            prompt = template.format(context=context, question=question.question)
        notes = hits + [note for note, _ in result.linked]
        if isinstance(mem.llm, ChatLLM):
            text = mem.llm.answer_json(prompt, AMEM_ADVERSARIAL_TEMPERATURE if adversarial else AMEM_TEMPERATURE)
        else:
            text = self._offline(mem.llm, question, notes)
        return Answer(text=text, notes=result.notes, gate=result.gate, prompt=prompt, gated_out=result.gated_out,
                      view=result.view, linked=result.linked)

    @staticmethod
    def _offline(llm: OfflineLLM, question: Question, notes: list[Note]) -> str:
        """The offline answerer; on the two-choice question, "not mentioned" exactly when it abstains."""
        if question.category != ADVERSARIAL:
            return llm.answer(question.question, notes, question.category == TEMPORAL)
        if notes and llm.best_sentence(question.question, notes)[2] >= llm.abstain_below:
            return str(question.adversarial)
        return NOT_MENTIONED_OPTION

    def config(self) -> dict[str, Any]:
        return {"protocol": "amem", "categories": list(self.categories), "average": "micro over questions",
                "turn_text": '"Speaker " + speaker + "says : " + text (A-Mem\'s, no space before "says")',
                "dates": "LoCoMo's session date strings", **self.settings(),
                "context_order": "rank order, each hit followed by its linked notes",
                "answer_call": f"A-Mem's per-category prompts, JSON {{answer}}, temperature {AMEM_TEMPERATURE} "
                               f"({AMEM_ADVERSARIAL_TEMPERATURE} adversarial); offline: the sentence answerer, "
                               "'not mentioned' on the two-choice question when it abstains",
                "adversarial_reference": "LoCoMo's adversarial_answer (A-Mem's final_answer)",
                "adversarial_option_order": f"seeded per question (seed {self.seed}); A-Mem's is unseeded"}


@dataclass
class Asker:
    """Everything one question needs: the store, the probes, who owns what, the protocol."""

    mem: Any  # BioMemory on a working copy
    bio: BioSet
    owners: list[int]  # identity id of conversation i
    labels: dict[int, str]  # identity id -> sample_id
    dia_ids: dict[int, str]  # note id -> dia_id
    protocol: Protocol

    def turns(self, notes: Sequence[Any]) -> list[tuple[str, str | None]]:
        """(sample_id, dia_id) of each note: the turn it stores."""
        return [(self.labels[n.owner], self.dia_ids.get(n.id)) for n in notes]

    def record(self, question: Question, index: int, mode: str, role: str, answer: Any) -> dict[str, Any]:
        """One per-question record: gate decision, the notes the answer could read, answer and scores.
        Leakage counts every note read, linked ones included."""
        probe_index = index if role == "owner" else non_owner(index, len(self.owners))
        probe_identity = self.owners[probe_index]
        scores = answer.gate.scores
        hits, linked = [n for n, _ in answer.notes], [n for n, _ in answer.linked]
        gold = self.protocol.reference(question)
        evidence = [(question.conversation, e) for e in question.evidence]
        return {
            "mode": mode, "role": role, "conversation": question.conversation, "qa_index": question.index,
            "category": question.category, "question": question.question, "gold": gold,
            "evidence": list(question.evidence), "probe_identity": self.labels[probe_identity],
            "gate": {"admitted": [self.labels[i] for i in answer.gate.admitted],
                     "owner_admitted": self.owners[index] in answer.gate.admitted,
                     "probe_score": scores.get(probe_identity), "owner_score": scores.get(self.owners[index]),
                     "threshold": answer.gate.threshold},
            "retrieved": [{"note": n.id, "owner": self.labels[n.owner], "dia_id": self.dia_ids.get(n.id),
                           "score": round(float(s), 4)} for n, s in answer.notes],
            "linked": [{"note": n.id, "owner": self.labels[n.owner], "dia_id": self.dia_ids.get(n.id), "via": via}
                       for n, via in answer.linked],
            "answer": answer.text,
            "scores": {"f1": amem_f1(answer.text, gold), "bleu1": amem_bleu1(answer.text, gold),
                       "locomo_f1": locomo_f1(answer.text, gold, question.category),
                       "recall": evidence_recall(evidence, self.turns(hits)),
                       "recall_linked": evidence_recall(evidence, self.turns(hits + linked))
                       if self.protocol.links else None,
                       "leaked": sum(n.owner != probe_identity for n in hits + linked),
                       "retrieved": len(hits) + len(linked), "prompt_tokens": self.tokens(answer.prompt)},
        }

    def tokens(self, text: str) -> int:
        """Length of a prompt in the text encoder's word pieces (a proxy for an LLM's tokens)."""
        return len(self.mem.text.model.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def ask(self, question: Question, probe_index: int, policy: str | None = None) -> Any:
        return self.protocol.ask(self, question, self.bio.probes[probe_index], policy)
