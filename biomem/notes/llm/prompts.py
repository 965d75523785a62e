"""A-Mem's prompts (Xu et al., 2025): note analysis, evolution, query keywords and the LoCoMo
short answer, the latter with one added sentence that lets the model say NOT_MENTIONED."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...stores.records import Note

NOT_MENTIONED = "Not mentioned in your memories."  # the offline answerer's abstention
# The analysis prompt's placeholder for the context, which small models copy back verbatim.
CONTEXT_PLACEHOLDER = "one sentence summarizing the main topic, key points and purpose"

ANALYZE_PROMPT = """Generate a structured analysis of the following content by:
1. Identifying the most salient keywords (focus on nouns, verbs, and key concepts)
2. Extracting core themes and contextual elements
3. Creating relevant categorical tags

Format the response as a JSON object:
{{
    "keywords": [several specific, distinct keywords, most important first; no names of speakers, no times; at least three],
    "context": "one sentence summarizing the main topic, key points and purpose",
    "tags": [several broad categories or themes for classification; at least three]
}}

Content for analysis:
{content}"""  # noqa: E501 - A-Mem's prompt, word for word

EVOLVE_PROMPT = """You are an AI memory evolution agent responsible for managing and evolving a knowledge base.
Analyze the new memory note according to keywords and context, also with its nearest neighbor memories.
Make decisions about its evolution.

The new memory context:
{context}
content: {content}
keywords: {keywords}

The nearest neighbor memories (each with its memory_id):
{neighbours}

Based on this information, determine:
1. Should this memory be evolved? Consider its relationships with other memories.
2. What specific actions should be taken (strengthen, update_neighbor)?
   2.1 If strengthen: which memory_ids should it be connected to, and the updated tags of this memory.
   2.2 If update_neighbor: the updated context and tags of each neighbor, in the order given;
       unchanged ones repeat their original context and tags.
The length of new_context_neighborhood and new_tags_neighborhood must equal {count}.
Return your decision as JSON:
{{
    "should_evolve": true or false,
    "actions": ["strengthen", "update_neighbor"],
    "suggested_connections": [memory_id, ...],
    "tags_to_update": ["tag_1", ..., "tag_n"],
    "new_context_neighborhood": ["new context", ..., "new context"],
    "new_tags_neighborhood": [["tag_1", ..., "tag_n"], ..., ["tag_1", ..., "tag_n"]]
}}"""

ANSWER_PROMPT = """Based on the context: {context}, write an answer in the form of a short phrase for the following question. Answer with exact words from the context whenever possible.

Question: {question} If the context does not say, answer: {not_mentioned} Short answer:"""  # noqa: E501 - A-Mem's prompt, word for word

TEMPORAL_ANSWER_PROMPT = """Based on the context: {context}, answer the following question. Use DATE of CONVERSATION to answer with an approximate date. Please generate the shortest possible answer, using words from the conversation where possible, and avoid using any subjects.

Question: {question} If the context does not say, answer: {not_mentioned} Short answer:"""  # noqa: E501 - A-Mem's prompt, word for word

# A-Mem's generate_query_llm (WujiangXu/AgenticMemory test_advanced.py, 7f716dc): its example uses
# commas whatever the instruction says; the reply's "keywords" string is the retrieval query as is.
KEYWORDS_PROMPT = """Given the following question, generate several keywords, using 'cosmos' as the separator.

Question: {question}

Format your response as a JSON object with a "keywords" field containing the selected text.

Example response format:
{{"keywords": "keyword1, keyword2, keyword3"}}"""

NO_CONTEXT_PROMPT = """Write an answer in the form of a short phrase for the following question.

Question: {question} Short answer:"""


def serialize_notes(notes: Sequence[Note]) -> str:
    """Notes as A-Mem shows them to the LLM, oldest first."""
    return "\n".join(
        f"talk start time:{n.timestamp} memory content: {n.content} memory context: {n.context} "
        f"memory keywords: {', '.join(n.keywords)} memory tags: {', '.join(n.tags)}"
        for n in sorted(notes, key=lambda n: (n.timestamp, n.id)))


def answer_prompt(question: str, notes: Sequence[Note], temporal: bool = False) -> str:
    """The answer prompt; with no notes the LLM gets no memory context at all."""
    if not notes:
        return NO_CONTEXT_PROMPT.format(question=question)
    template = TEMPORAL_ANSWER_PROMPT if temporal else ANSWER_PROMPT
    return template.format(context=serialize_notes(notes), question=question, not_mentioned=NOT_MENTIONED)


def fit_notes(question: str, notes: Sequence[Note], temporal: bool, budget: int,
              count: Callable[[str], int]) -> list[Note]:
    """The longest head of `notes` (best-ranked first) whose answer prompt is at most `budget` tokens
    by `count`: the lowest-ranked notes are left out first, never one above a note that stays. A prompt
    of fewer UTF-8 bytes than `budget` is not counted: a word piece spans at least one byte."""
    whole = answer_prompt(question, notes, temporal)
    if len(whole.encode()) < budget or count(whole) <= budget:
        return list(notes)
    template = TEMPORAL_ANSWER_PROMPT if temporal else ANSWER_PROMPT
    used = count(template.format(context="", question=question, not_mentioned=NOT_MENTIONED))
    kept: list[Note] = []
    for note in notes:  # each note is one line of the context: their counts add up
        used += count(serialize_notes([note]))
        if used > budget:
            break
        kept.append(note)
    while kept and count(answer_prompt(question, kept, temporal)) > budget:  # the whole prompt decides
        kept.pop()
    return kept
