"""One configuration: every environment variable Bio-Memory reads, parsed and checked in one place.

    settings = Settings.from_env()            # os.environ; bad values are InvalidInputError
    mem = BioMemory.from_settings(settings)   # what the CLI and the web app serve
    print(markdown_table())                   # docs/configuration.md's table (python -m biomem.settings)

Each field's metadata names its variable(s), says what it means, shows its default and which
surfaces honour it (engine: `BioMemory` and the modules under it; CLI: `biomem`; app: the web
demo, `python app.py`; serve: `biomem serve`, page, REST and MCP in one). A variable set to an
empty string counts as unset. Booleans take 1/true/yes/on or 0/false/no/off. Nothing is read at
import time: the engine, the CLI and the app each read the environment when they start (tests
change it per test).

BIOMEM_WEIGHTS, BIOMEM_CCNET_WEIGHTS and HF_HUB_OFFLINE are read by `modalities` (which
imports nothing from `biomem`) through its own readers; the fields here show what they return,
always from the process environment.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import modalities.ccnet
import modalities.weights

from .errors import InvalidInputError
from .vocabulary import DISCLOSURES, POLICIES, AttemptLimits

T = TypeVar("T")
Environ = Mapping[str, str]

DEFAULT_TEXT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# The answer prompt's budget in the text encoder's word pieces: an 8,192-token model keeps room for the
# answer and for a tokenizer that cuts finer; at least enough for a question and one note.
DEFAULT_PROMPT_TOKENS = 4_096
MIN_PROMPT_TOKENS = 256
DEFAULT_TARGET_FPIR = 0.01  # a stranger taken for someone enrolled at most once in 100 probes
ENGINE, CLI, APP, SERVE = "engine", "CLI", "app", "serve"  # serve: `biomem serve`
EVERYWHERE = (ENGINE, CLI, APP)
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")  # a DNS name: letters, digits, -, _ and dots


# ---- parsing one value ----------------------------------------------------------------------------

def _raw(env: Environ, name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _parsed(env: Environ, name: str, parse: Callable[[str], T], default: T) -> T:
    """`parse` of variable `name`, or `default` when it is unset; a bad value names the variable."""
    raw = _raw(env, name)
    if raw is None:
        return default
    try:
        return parse(raw)
    except ValueError as exc:  # InvalidInputError is a ValueError too
        raise InvalidInputError(f"{name}={raw!r}: {exc}") from None


def _flag(text: str) -> bool:
    word = text.lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise ValueError(f"use one of {', '.join(TRUE_WORDS)} or {', '.join(FALSE_WORDS)}")


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError("a port is a whole number from 1 to 65535")
    return int(text)


def _log_level(text: str) -> str:
    if not isinstance(logging.getLevelName(text.upper()), int):
        raise ValueError("use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return text.upper()


def _one_of(allowed: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"use one of {', '.join(allowed)}")
        return text
    return parse


def _policy(env: Environ) -> str:
    return _parsed(env, "BIOMEM_POLICY", _one_of(POLICIES), "best")


def _disclosure(env: Environ) -> str:
    return _parsed(env, "BIOMEM_DISCLOSURE", _one_of(DISCLOSURES), "demo" if _on_space(env) else "private")


def llm_spec(spec: str) -> tuple[str, str]:
    """(kind, model) of an LLM spec: "offline", "openai:<model>" or "hf:<model-id>"."""
    kind, _, model = spec.partition(":")
    if (kind == "offline" and not model) or (kind in ("openai", "hf") and model):
        return kind, model
    raise InvalidInputError(f"unknown LLM {spec!r}: use offline, openai:<model> or hf:<model-id>")


def _llm(text: str) -> str:
    llm_spec(text)
    return text


def _prompt_tokens(text: str) -> int:
    if not text.isdigit() or int(text) < MIN_PROMPT_TOKENS:
        raise ValueError(f"a whole number of word pieces, at least {MIN_PROMPT_TOKENS}")
    return int(text)


def _rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise ValueError("a rate between 0 and 1, e.g. 0.01") from None
    if not 0.0 < rate < 1.0:
        raise ValueError(f"a rate lies strictly between 0 and 1, got {rate}")
    return rate


def _taus(text: str) -> dict[str | None, float]:
    """"name=τ,name=τ", a bare τ meaning the store's default encoder (key None)."""
    taus: dict[str | None, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        modality = name.strip() if sep else None
        if sep and not modality:
            raise ValueError(f"{item!r} names no encoder; use encoder=τ[,encoder=τ] or one bare τ")
        if modality in taus:
            raise ValueError(f"τ of {modality or 'the default encoder'} is given twice")
        try:
            tau = float(value if sep else item)
        except ValueError:
            raise ValueError(f"{item!r} is not encoder=τ or a bare τ") from None
        if not -1.0 <= tau <= 1.0:
            raise ValueError(f"τ is a cosine and must lie in [-1, 1], got {tau}")
        taus[modality] = tau
    return taus


def _host_names(text: str) -> tuple[str, ...]:
    """"name,name": host names or IP addresses as a browser's address bar shows them, without scheme, port or path."""
    names = []
    for item in filter(None, (part.strip().lower() for part in text.split(","))):
        if not HOST_NAME.fullmatch(item) and not _address(item.removeprefix("[").removesuffix("]")):
            raise ValueError(f"{item!r} is not a host name: give names such as kiosk.lan or 192.168.1.5, "
                             "without a scheme, port or path, separated by commas")
        names.append(item)
    return tuple(names)


def _address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _allowed_hosts(env: Environ) -> tuple[str, ...]:
    return (_parsed(env, "BIOMEM_ALLOWED_HOSTS", _host_names, ())
            + _parsed(env, "SPACE_HOST", _host_names, ()))


def _on_space(env: Environ) -> bool:
    return _raw(env, "SPACE_ID") is not None


def _port_of(env: Environ) -> int:
    gradio = _parsed(env, "GRADIO_SERVER_PORT", _port, None)
    port = _parsed(env, "PORT", _port, 7860)
    return gradio or port


def _key_file(env: Environ) -> Path:
    explicit = _raw(env, "BIOMEM_KEY_FILE")
    if explicit:
        return Path(explicit).expanduser()
    return Path(_raw(env, "XDG_CONFIG_HOME") or Path.home() / ".config") / "biomem" / "key"


def _cache(env: Environ) -> Path:
    return Path(_raw(env, "XDG_CACHE_HOME") or Path.home() / ".cache") / "biomem"


def _setting(env: tuple[str, ...], meaning: str, default: str, surfaces: tuple[str, ...],
             read: Callable[[Environ], Any], *, argument: str = "", secret: bool = False) -> Any:
    """A Settings field: how it is read and what the table in docs/configuration.md says about it."""
    return field(repr=not secret, metadata={"env": env, "meaning": meaning, "default": default,
                                            "surfaces": surfaces, "argument": argument, "read": read})


# ---- the settings ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """Every setting, read from the environment once by `from_env`; override one with
    `dataclasses.replace(settings, policy="all")`. Secrets are left out of repr()."""

    db: str = _setting(
        ("BIOMEM_DB",), "the store: an SQLite file (its derived indexes in `<db>.index/`) or a "
        "`postgresql://` URL (see Storage)", "`biomem.db`",
        (CLI, APP), lambda env: _raw(env, "BIOMEM_DB") or "biomem.db", argument="`BioMemory(path)`, `--db`",
        secret=True)  # a PostgreSQL URL may carry a password
    encoder: str | None = _setting(
        ("BIOMEM_ENCODER",), "biometric encoder of a new store (stored in it when created)",
        "`face-arcface-s`", EVERYWHERE, lambda env: _raw(env, "BIOMEM_ENCODER"),
        argument="`encoder=`, `--encoder`")
    text_model: str = _setting(
        ("BIOMEM_TEXT_MODEL",), "sentence encoder: a local folder or `org/name` on the Hub",
        f"`{DEFAULT_TEXT_MODEL}`", EVERYWHERE, lambda env: _raw(env, "BIOMEM_TEXT_MODEL") or DEFAULT_TEXT_MODEL,
        argument="`text_model=`")
    llm: str = _setting(
        ("BIOMEM_LLM",), "`offline`, `openai:<model>` (OpenAI, vLLM, Ollama, llama.cpp, HF router) or "
        "`hf:<model-id, folder or .gguf file>` (local transformers)", "`offline`", EVERYWHERE,
        lambda env: _parsed(env, "BIOMEM_LLM", _llm, "offline"), argument="`llm=`, `--llm`")
    openai_base_url: str | None = _setting(
        ("OPENAI_BASE_URL",), "endpoint of the `openai:` LLM", "OpenAI's", EVERYWHERE,
        lambda env: _raw(env, "OPENAI_BASE_URL"), argument="`OpenAIChat(base_url=)`")
    openai_api_key: str | None = _setting(
        ("OPENAI_API_KEY",), "API key of the `openai:` LLM (a Space secret)", "`not-needed`", EVERYWHERE,
        lambda env: _raw(env, "OPENAI_API_KEY"), argument="`OpenAIChat(api_key=)`", secret=True)
    policy: str = _setting(
        ("BIOMEM_POLICY",), "gate policy: `best` admits only the best-matching identity, `all` every "
        "identity at or above τ (the paper's literal rule)", "`best`", (CLI, APP), _policy,
        argument="`policy=`, `--policy`")
    disclosure: str = _setting(
        ("BIOMEM_DISCLOSURE",), "what a requester learns about others: `private` or `demo` "
        "(sample people only, see Security model)", "`private` (`demo` on a Space and in the Dockerfile)", EVERYWHERE,
        _disclosure,
        argument="`disclosure=`")
    attempts: AttemptLimits | None = _setting(
        ("BIOMEM_ATTEMPTS",), "attempt limits per client address: `MISSES/WINDOW[/COOLDOWN]` seconds (the pace of "
        "any misses, past which only the step-up τ admits for COOLDOWN), or `off`; the daily budget and the "
        "near-miss rules are in the Gate page",
        "`20/60/60`; budget 5,000 / enrolled people a day; 5 near-misses per 10 min",
        (ENGINE, APP),
        lambda env: _parsed(env, "BIOMEM_ATTEMPTS", AttemptLimits.parse, AttemptLimits()), argument="`limits=`")
    target_fpir: float = _setting(
        ("BIOMEM_TARGET_FPIR",), "the false-positive identification rate (a stranger taken for someone enrolled) "
        "a calibrated τ must keep: enrolling past the N where 1 − (1 − FMR(τ))^N exceeds it is refused until τ is "
        "raised; an uncalibrated τ limits nothing (see Gate)", f"`{DEFAULT_TARGET_FPIR}`", EVERYWHERE,
        lambda env: _parsed(env, "BIOMEM_TARGET_FPIR", _rate, DEFAULT_TARGET_FPIR), argument="`mem.target_fpir`")
    prompt_tokens: int = _setting(
        ("BIOMEM_PROMPT_TOKENS",), "budget of the answer prompt in the text encoder's word pieces: the "
        "lowest-ranked notes are left out first, and the answer says how many (`omitted`)",
        f"`{DEFAULT_PROMPT_TOKENS}`", EVERYWHERE,
        lambda env: _parsed(env, "BIOMEM_PROMPT_TOKENS", _prompt_tokens, DEFAULT_PROMPT_TOKENS),
        argument="`prompt_tokens=`")
    tau: dict[str | None, float] = _setting(
        ("BIOMEM_TAU",), "τ stored at start-up, e.g. `face-arcface-s=0.43,palm-compcode=0.3`; "
        "a bare number is the default encoder's", "the stored τ", (CLI, APP),
        lambda env: _parsed(env, "BIOMEM_TAU", _taus, {}), argument="`mem.set_threshold(tau, modality)`")
    key: str | None = _setting(
        ("BIOMEM_KEY",), "template key (URL-safe base64, 32 bytes)", "the key file", EVERYWHERE,
        lambda env: _raw(env, "BIOMEM_KEY"), argument="`key=`", secret=True)
    key_file: Path = _setting(
        ("BIOMEM_KEY_FILE", "XDG_CONFIG_HOME"), "key file, made on first use with mode 0600",
        "`$XDG_CONFIG_HOME/biomem/key` (`~/.config/biomem/key`)", EVERYWHERE, _key_file,
        argument="`biomem rekey --key-file`")
    weights: Path = _setting(
        ("BIOMEM_WEIGHTS",), "folder of hand-placed or converted encoder weights (read by `modalities`)",
        "`weights`", EVERYWHERE, lambda env: modalities.weights.weights_dir())
    ccnet_weights: str = _setting(
        ("BIOMEM_CCNET_WEIGHTS",), "CCNet palm checkpoint (read by `modalities`)",
        "`ccnet.pth` in the weights folder", EVERYWHERE, lambda env: modalities.ccnet.default_weights(),
        argument="`CCNetEncoder(weights=)`")
    hub_offline: bool = _setting(
        ("HF_HUB_OFFLINE",), "no Hugging Face Hub downloads: models from the cache or pip packages "
        "(read by `modalities`)", "off", EVERYWHERE, lambda env: modalities.weights.hub_offline())
    cache: Path = _setting(
        ("XDG_CACHE_HOME",), "caches, in `$XDG_CACHE_HOME/biomem`: `onnx/` the text encoder's onnxruntime "
        "export (made from the loaded model on first use), `locomo/` LoCoMo data and cached ingestions of "
        "`biomem eval locomo`", "`~/.cache`", EVERYWHERE, _cache,
        argument="`TextEncoder(onnx_cache=)`, `--cache-dir`")
    on_space: bool = _setting(
        ("SPACE_ID",), "set by Hugging Face on a Space: the defaults marked \"on a Space\"", "unset",
        EVERYWHERE, _on_space)
    palm_encoder: str = _setting(
        ("BIOMEM_PALM_ENCODER",), "palm encoder of the demo's synthetic palms", "`palm-compcode`", (APP, SERVE),
        lambda env: _raw(env, "BIOMEM_PALM_ENCODER") or "palm-compcode")
    load_demo: bool = _setting(
        ("BIOMEM_LOAD_DEMO",), "build the demo at start-up if the store is empty",
        "on on a Space and in the Dockerfile, else off",
        (APP, SERVE), lambda env: _parsed(env, "BIOMEM_LOAD_DEMO", _flag, _on_space(env)))
    admin: bool = _setting(
        ("BIOMEM_ADMIN",), "allow server-side actions: LoCoMo import from a path, folder calibration, "
        "storing τ", "off, on every launch path", (APP, SERVE), lambda env: _parsed(env, "BIOMEM_ADMIN", _flag, False))
    trust_proxy: bool = _setting(
        ("BIOMEM_TRUST_PROXY",), "client address (for attempt limits) from the last `X-Forwarded-For` hop "
        "(off: the socket's peer, whatever that header says)",
        "on on a Space, else off", (APP, SERVE),
        lambda env: _parsed(env, "BIOMEM_TRUST_PROXY", _flag, _on_space(env)))
    allowed_hosts: tuple[str, ...] = _setting(
        ("BIOMEM_ALLOWED_HOSTS", "SPACE_HOST"), "names besides `localhost`, `127.0.0.1`, `[::1]` and the bind address "
        "(unless `0.0.0.0`) that the page, and a keyless REST caller, may be reached by, comma-separated: any other "
        "Host or Origin is refused (DNS rebinding, cross-site posts; see Security model)",
        "none; on a Space its own name (`SPACE_HOST`, set by Hugging Face)", (APP, SERVE), _allowed_hosts)
    locomo: str = _setting(
        ("BIOMEM_LOCOMO",), "path offered for the LoCoMo import", "empty", (APP, SERVE),
        lambda env: _raw(env, "BIOMEM_LOCOMO") or "")
    log_level: str = _setting(
        ("BIOMEM_LOG",), "log level", "`INFO`", (APP, SERVE),
        lambda env: _parsed(env, "BIOMEM_LOG", _log_level, "INFO"))
    host: str = _setting(
        ("GRADIO_SERVER_NAME",), "bind address", "`127.0.0.1` (`0.0.0.0` on a Space and in the Dockerfile)",
        (APP, SERVE), lambda env: _raw(env, "GRADIO_SERVER_NAME") or ("0.0.0.0" if _on_space(env) else "127.0.0.1"))
    port: int = _setting(
        ("GRADIO_SERVER_PORT", "PORT"), "HTTP port (the first one set)", "7860", (APP, SERVE), _port_of)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Every setting from `environ` (default os.environ); a bad value is an InvalidInputError
        naming its variable."""
        env = os.environ if environ is None else environ
        return cls(**{f.name: f.metadata["read"](env) for f in fields(cls)})


def markdown_table() -> str:
    """The configuration table of docs/configuration.md, one row per setting, from the fields' metadata."""
    rows = ["| variable | meaning | default | used by | argument |",
            "|---|---|---|---|---|"]
    for f in fields(Settings):
        meta = f.metadata
        rows.append(f"| {', '.join(f'`{name}`' for name in meta['env'])} | {meta['meaning']} | {meta['default']} "
                    f"| {', '.join(meta['surfaces'])} | {meta['argument'] or '—'} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
