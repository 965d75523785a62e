"""The demo's look and words: CSS, theme, the introduction and the plain-language glosses."""

from __future__ import annotations

import gradio as gr

TITLE = "Bio-Memory"

HEADING = "# Bio-Memory — one agent, many people, each with their own memories"

INTRO = """\
Every memory belongs to a face or palmprint. When someone asks, their probe is matched first (the
**gate**); only the matched person's memories may reach the LLM — **a stranger gets none**.
Try it: **Load demo**, then **Compare** the same question as Ana and as a stranger, then **Chat**
with a probe per message (upload, webcam or a sample person). Probe images are used once, then deleted.
A **household** shares some memories: Ana, Ben and Chloe's reaches each of them by their own probe (a
note can be hidden from one of them, as Chloe's surprise party is), and nobody outside it.
"""

GLOSS = ("**Probe**: the face or palm photo that shows who is asking. **Similarity**: how alike the probe "
         "and an enrolled person's photos are, from 0 (unrelated) to 1 (identical; the cosine of their "
         "embeddings). **Threshold τ**: the similarity a probe must reach to count as that person.")

THEME = gr.themes.Soft(  # system fonts: no request to a font CDN from the visitor's browser
    font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "Helvetica", "Arial", "sans-serif"],
    font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"])

CSS = """
.bm-verdict {font-size: 1.05em; padding: 8px 10px; border-radius: 8px; margin-bottom: 6px;}
.bm-speaker {font-size: .95em; padding: 4px 10px; border-radius: 8px; margin-bottom: 6px;}
.bm-ok {background: rgba(34,160,90,.14); border: 1px solid rgba(34,160,90,.45);}
.bm-no {background: rgba(210,60,60,.12); border: 1px solid rgba(210,60,60,.45);}
.bm-meta {font-size: .85em; opacity: .8; margin: 4px 0 6px;}
.bm-empty {font-size: .9em; opacity: .7; padding: 6px 2px;}
.bm-panel table.bm-scores, .bm-panel table.bm-notes {width: 100%; border-collapse: collapse;
  font-size: .9em; margin: 0; border: none !important;}
.bm-panel table tr {border: none !important;}
.bm-panel table th, .bm-panel table td {border: none !important; text-align: left; padding: 3px 6px;
  border-bottom: 1px solid var(--border-color-primary) !important; vertical-align: top;}
.bm-panel table th {font-weight: 600; opacity: .7; font-size: .92em;}
.bm-num {font-variant-numeric: tabular-nums; white-space: nowrap;}
.bm-time {white-space: nowrap; opacity: .8;}
.bm-who {white-space: nowrap; font-weight: 600;}
.bm-from {white-space: nowrap;}
.bm-shared {font-weight: 600;}
.bm-own {opacity: .7;}
.bm-barcell {width: 45%;}
.bm-bar {position: relative; height: 12px; border-radius: 6px; background: rgba(128,128,128,.18);
  margin-top: 3px;}
.bm-fill {height: 100%; border-radius: 6px; background: rgba(128,128,128,.55);}
.bm-in .bm-fill {background: rgb(34,160,90);}
.bm-above .bm-fill {background: rgb(220,160,40);}
.bm-tau {position: absolute; top: -3px; bottom: -3px; width: 2px; background: rgb(210,60,60);}
.bm-mark {font-size: .85em; opacity: .8; white-space: nowrap;}
.bm-more {font-size: .85em; opacity: .7;}
.bm-status {font-size: .92em; line-height: 1.6; padding: 10px 12px; border-radius: 8px;
  border: 1px solid var(--border-color-primary); background: var(--background-fill-secondary); height: 100%;}

.bm-panel {display: flex; flex-direction: column; gap: 2px;}
.bm-label {font-size: .78em; text-transform: uppercase; letter-spacing: .04em; opacity: .65;
  margin-top: 10px; font-weight: 600;}
.bm-answer {font-size: 1.1em; padding: 8px 10px; border-radius: 8px;
  background: var(--background-fill-secondary); border: 1px solid var(--border-color-primary);}
.bm-hint {font-size: .85em; opacity: .75;}
#bm-samples-a button, #bm-samples-b button, .bm-samples button {min-width: 0 !important;}
.bm-gloss {font-size: .85em; opacity: .8;}
.bm-chart svg {width: 100%; max-width: 520px; height: auto;}
.bm-c-text {font-size: 11px; fill: currentColor; opacity: .8;}
.bm-c-grid {stroke: rgba(128,128,128,.3); stroke-width: 1;}
.bm-c-tau {stroke: rgb(210,60,60); stroke-width: 2;}
.bm-c-a {fill: rgb(40,110,220);}
.bm-c-b {fill: rgb(230,140,30);}
/* probe images: the label sits above the drop zone, not over its upload icon and words; a long one wraps by
   word, never cut short */
.bm-probe {display: flex !important; flex-direction: column !important;}
.bm-probe > label[data-testid='block-label'] {position: static !important; flex: none; align-self: flex-start;
  margin: 6px 0 0 6px; max-width: calc(100% - 12px); white-space: normal; overflow-wrap: normal; word-break: normal;}
.bm-probe > .image-container {flex: 1 1 0; min-height: 0; height: auto !important;}
.bm-probe .upload-container > .wrap > div > button > .wrap {min-height: 0; height: 100%;}  /* "Access webcam" */
/* the chat: its label above the messages, not over the first one; no clear button (the chat is the record) */
#bm-chatbot .wrapper {flex-direction: column;}
#bm-chatbot .wrapper > label[data-testid='block-label'] {position: static; flex: none; align-self: flex-start;
  margin: 6px 0 4px 6px;}
#bm-chatbot .bubble-wrap {flex: 1 1 0; min-height: 0; height: auto;}
#bm-chatbot button[aria-label='Clear'] {display: none;}
@media (max-width: 640px) {
  #bm-heading h1 {font-size: 1.25em;}
  /* probe labels in smaller type: whole on one line ("Who is asking? Probe for this message"), so that the
     180 px boxes of second probes keep room for their words */
  .bm-probe > label[data-testid='block-label'] {font-size: .85em;}
  /* a shorter hero, so that the Compare tab starts on the first screen: the heading, Load demo, the
     introduction, the tabs; the glossary, the store's status and the encoder menu after them */
  #bm-hero, #bm-hero > .column:not(#bm-start) {display: contents;}
  #bm-heading {order: -2;}
  #bm-start {order: -1;}  /* Load demo right under the heading, not below the introduction */
  #bm-gloss, #bm-top, #bm-unavailable {order: 1;}
  #bm-hero .prose p, #bm-tabs .bm-hint .prose p {line-height: 1.45;}
  #bm-tabs .bm-hint .prose {font-size: var(--text-sm) !important;}
  .form:has(> #bm-cmp-question) {min-width: 100% !important;}  /* the question on its own line, Compare below */
  #bm-top {flex-direction: column !important;}
  #bm-top > * {min-width: 0 !important; width: 100% !important;}
  .bm-status {word-break: normal; overflow-wrap: anywhere;}
  /* the retrieved notes fit their panel: time and origin wrap by word, so the memory keeps its width */
  .bm-panel table.bm-notes :is(.bm-time, .bm-from) {white-space: normal;}
  .bm-panel table.bm-notes td {overflow-wrap: break-word;}  /* a long link or code breaks rather than widens */
  /* My notes: each column wide enough for its words, the headers on one line; id, time and memory fill the
     screen, tags and from follow as the table scrolls sideways */
  #bm-my-notes :is(th, [role=gridcell]) {min-width: var(--bm-col) !important; max-width: var(--bm-col) !important;
    width: var(--bm-col) !important; flex: 0 0 var(--bm-col) !important;}
  #bm-my-notes :is(th, [role=gridcell]):nth-child(1) {--bm-col: 3em;}  /* id */
  #bm-my-notes :is(th, [role=gridcell]):nth-child(2) {--bm-col: 6.5em;}  /* time */
  #bm-my-notes :is(th, [role=gridcell]):nth-child(3) {--bm-col: 13em;}  /* memory */
  #bm-my-notes :is(th, [role=gridcell]):nth-child(4) {--bm-col: 8em;}  /* tags */
  #bm-my-notes :is(th, [role=gridcell]):nth-child(5) {--bm-col: 9em;}  /* from */
  #bm-my-notes th .header {white-space: nowrap;}
}
"""
