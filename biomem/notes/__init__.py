"""The notes layer: what is remembered and how it is read. The A-Mem agent (notes, links, evolution), the text
encoders, the LLM backends and llama.cpp's server, and time parsing; no biometrics here."""
