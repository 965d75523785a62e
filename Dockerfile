# Bio-Memory as a service: `biomem serve` on port 7860 (the page at /, REST at /v1, MCP at /mcp), as
# uid 1000 with the Hugging Face cache in the user's home (the convention of Hugging Face Docker
# Spaces; works the same anywhere). The template key lives in ~/.config/biomem: keep it on a volume
# beside the data, or a new container cannot open the store.
#
#   docker build -t biomem .
#   V="-v biomem-data:/home/user/data -v biomem-config:/home/user/.config"
#   docker run --rm $V biomem biomem keys create kiosk --role agent   # once: serve refuses 0.0.0.0 without a key
#   docker run --rm -p 7860:7860 $V biomem
#   docker run ... -e BIOMEM_LLM=openai:gpt-4o-mini -e OPENAI_API_KEY=... biomem   # a real LLM
#   docker run --rm -p 7860:7860 $V biomem python app.py              # the public page only (a demo Space)
#
# Configuration: the environment variables of biomem.settings (the README's "Configuration"
# table; `python -m biomem.settings` prints it). The image is the public demo: it loads the sample
# people and shows them transparently (BIOMEM_DISCLOSURE=demo, which never shows a real
# enrolment); for real people run it with -e BIOMEM_DISCLOSURE=private -e BIOMEM_LOAD_DEMO=0.

ARG PYTHON=3.11

# ---- build: wheels that need a compiler (hnswlib, insightface) are built here ---------------------
FROM python:${PYTHON}-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 1000 user
USER user
ENV PATH=/home/user/.local/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /home/user/app
# CPU-only torch first: the same pinned version from PyPI would bring several GB of CUDA wheels.
# (2.14.1+cpu satisfies requirements.txt's torch==2.14.1, so pip keeps it.)
RUN pip install --user --index-url https://download.pytorch.org/whl/cpu torch==2.14.1 torchvision==0.29.1
COPY --chown=user requirements.txt .
RUN pip install --user -r requirements.txt
# voice-ge2e's weights: resemblyzer's wheel without its dependencies (librosa, numba: none used)
RUN pip install --user --no-deps resemblyzer==0.1.4
COPY --chown=user . .
RUN pip install --user --no-deps .

# ---- run -----------------------------------------------------------------------------------------
FROM python:${PYTHON}-slim
RUN useradd --create-home --uid 1000 user
USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    HF_HOME=/home/user/.cache/huggingface \
    PYTHONUNBUFFERED=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    HF_HUB_DISABLE_TELEMETRY=1 \
    GRADIO_SERVER_NAME=0.0.0.0 \
    PORT=7860 \
    BIOMEM_LOAD_DEMO=1 \
    BIOMEM_DISCLOSURE=demo \
    BIOMEM_DB=/home/user/data/biomem.db \
    MPLCONFIGDIR=/home/user/.cache/matplotlib
WORKDIR /home/user/app
COPY --from=build --chown=user /home/user/.local /home/user/.local
COPY --chown=user . .
RUN mkdir -p /home/user/data /home/user/.config /home/user/.cache/huggingface
VOLUME ["/home/user/data", "/home/user/.config"]
EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s \
    CMD python -c "import os, urllib.request; urllib.request.urlopen(f'http://127.0.0.1:{os.environ[\"PORT\"]}/v1/health', timeout=4)"
CMD ["biomem", "serve"]
