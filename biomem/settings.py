"""One configuration: every environment variable Bio-Memory reads, parsed and checked in one place.

    settings = Settings.from_env()            # os.environ; bad values are InvalidInputError
    mem = BioMemory.from_settings(settings)   # what the CLI and the web app serve
    print(markdown_table())                   # docs/configuration.md's table (python -m biomem.settings)

`Settings` is a pydantic-settings model: each field names its variable (`validation_alias`), says what it
means (`description`) and which surfaces honour it (engine: `BioMemory` and the modules under it; CLI:
`biomem`; app: the web demo, `python app.py`; serve: `biomem serve`, page, REST and MCP in one); the table
shows its default from the field itself. A variable set to an empty string counts as unset. Booleans take
1/true/yes/on or 0/false/no/off. Nothing is read at import time: the engine, the CLI and the app each read
the environment when they start (tests change it per test).

BIOMEM_WEIGHTS, BIOMEM_CCNET_WEIGHTS and HF_HUB_OFFLINE are read by `modalities` (which imports nothing
from `biomem`) through its own readers; the computed fields here show what they return, always from the
process environment.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic.fields import ComputedFieldInfo, FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings, SettingsConfigDict

import modalities.ccnet
import modalities.weights

from .errors import InvalidInputError
from .vocabulary import DISCLOSURES, POLICIES, AttemptLimits

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
# The defaults on a Hugging Face Space (SPACE_ID set), by field (Settings._space_defaults).
SPACE_DEFAULTS: dict[str, Any] = {"disclosure": "demo", "load_demo": True, "trust_proxy": True, "host": "0.0.0.0"}


# ---- parsing one value ----------------------------------------------------------------------------

def _parsed(parse: Callable[[str], Any]) -> BeforeValidator:
    """Parse a variable's text with `parse`; a value given in code (or a field's default) passes as it is."""
    return BeforeValidator(lambda value: parse(value.strip()) if isinstance(value, str) else value)


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


def _setting(variable: str | AliasChoices, meaning: str, surfaces: tuple[str, ...], default: Any = PydanticUndefined,
             *, shown: str = "", argument: str = "", **options: Any) -> Any:
    """A field read from `variable`, with what docs/configuration.md's table says of it; `shown` stands for a
    default that is not a plain value (computed, or the engine's)."""
    return Field(default, validation_alias=variable, description=meaning,
                 json_schema_extra={"surfaces": list(surfaces), "shown": shown, "argument": argument}, **options)


def _modalities_reads(variable: str, meaning: str, shown: str, argument: str = "") -> Callable[[Any], Any]:
    """A computed field showing what `modalities` reads from `variable`, with its row of the table."""
    return computed_field(description=meaning, json_schema_extra={
        "variable": variable, "surfaces": list(EVERYWHERE), "shown": shown, "argument": argument})


HostNames = Annotated[tuple[str, ...], _parsed(_host_names)]
Flag = Annotated[bool, _parsed(_flag)]


# ---- the settings ---------------------------------------------------------------------------------

class Settings(BaseSettings):
    """Every setting, read from the environment once by `from_env`; override one with
    `settings.model_copy(update={"policy": "all"})`. Secrets are left out of repr()."""

    model_config = SettingsConfigDict(case_sensitive=True, env_ignore_empty=True, enable_decoding=False,
                                      extra="ignore", frozen=True, str_strip_whitespace=True)

    db: str = _setting(
        "BIOMEM_DB", "the store: an SQLite file (its derived indexes in `<db>.index/`) or a `postgresql://` URL "
        "(see Storage)", (CLI, APP), "biomem.db", argument="`BioMemory(path)`, `--db`",
        repr=False)  # a PostgreSQL URL may carry a password
    encoder: str | None = _setting(
        "BIOMEM_ENCODER", "biometric encoder of a new store (stored in it when created)", EVERYWHERE, None,
        shown="`face-arcface-s`", argument="`encoder=`, `--encoder`")
    text_model: str = _setting(
        "BIOMEM_TEXT_MODEL", "sentence encoder: a local folder or `org/name` on the Hub", EVERYWHERE,
        DEFAULT_TEXT_MODEL, argument="`text_model=`")
    llm: Annotated[str, _parsed(_llm)] = _setting(
        "BIOMEM_LLM", "`offline`, `openai:<model>` (OpenAI, vLLM, Ollama, llama.cpp, HF router) or "
        "`hf:<model-id, folder or .gguf file>` (local transformers)", EVERYWHERE, "offline",
        argument="`llm=`, `--llm`")
    openai_base_url: str | None = _setting(
        "OPENAI_BASE_URL", "endpoint of the `openai:` LLM", EVERYWHERE, None, shown="OpenAI's",
        argument="`OpenAIChat(base_url=)`")
    openai_api_key: SecretStr = _setting(
        "OPENAI_API_KEY", "API key of the `openai:` LLM (a Space secret)", EVERYWHERE, SecretStr("not-needed"),
        argument="`OpenAIChat(api_key=)`")
    policy: Annotated[str, _parsed(_one_of(POLICIES))] = _setting(
        "BIOMEM_POLICY", "gate policy: `best` admits only the best-matching identity, `all` every identity at "
        "or above τ (the paper's literal rule)", (CLI, APP), "best", argument="`policy=`, `--policy`")
    disclosure: Annotated[str, _parsed(_one_of(DISCLOSURES))] = _setting(
        "BIOMEM_DISCLOSURE", "what a requester learns about others: `private` or `demo` (sample people only, "
        "see Security model)", EVERYWHERE, "private", argument="`disclosure=`")
    attempts: Annotated[AttemptLimits | None, _parsed(AttemptLimits.parse)] = _setting(
        "BIOMEM_ATTEMPTS", "attempt limits per client address: `MISSES/WINDOW[/COOLDOWN]` seconds (the pace of "
        "any misses, past which only the step-up τ admits for COOLDOWN), or `off`; the daily budget and the "
        "near-miss rules are in the Gate page", (ENGINE, APP), default_factory=AttemptLimits,
        shown="`20/60/60`; budget 5,000 / enrolled people a day; 5 near-misses per 10 min", argument="`limits=`")
    target_fpir: Annotated[float, _parsed(_rate)] = _setting(
        "BIOMEM_TARGET_FPIR", "the false-positive identification rate (a stranger taken for someone enrolled) a "
        "calibrated τ must keep: enrolling past the N where 1 − (1 − FMR(τ))^N exceeds it is refused until τ is "
        "raised; an uncalibrated τ limits nothing (see Gate)", EVERYWHERE, DEFAULT_TARGET_FPIR,
        argument="`mem.target_fpir`")
    prompt_tokens: Annotated[int, _parsed(_prompt_tokens)] = _setting(
        "BIOMEM_PROMPT_TOKENS", "budget of the answer prompt in the text encoder's word pieces: the lowest-ranked "
        "notes are left out first, and the answer says how many (`omitted`)", EVERYWHERE, DEFAULT_PROMPT_TOKENS,
        argument="`prompt_tokens=`")
    tau: Annotated[dict[str | None, float], _parsed(_taus)] = _setting(
        "BIOMEM_TAU", "τ stored at start-up, e.g. `face-arcface-s=0.43,palm-compcode=0.3`; a bare number is the "
        "default encoder's", (CLI, APP), default_factory=dict, shown="the stored τ",
        argument="`mem.set_threshold(tau, modality)`")
    key: SecretStr | None = _setting(
        "BIOMEM_KEY", "template key (URL-safe base64, 32 bytes)", EVERYWHERE, None, shown="the key file",
        argument="`key=`")
    config_home: Path = _setting(
        "XDG_CONFIG_HOME", "configuration folder: the default key file is `biomem/key` in it", EVERYWHERE,
        default_factory=lambda: Path.home() / ".config", shown="`~/.config`")
    key_file: Annotated[Path, _parsed(lambda text: Path(text).expanduser())] = _setting(
        "BIOMEM_KEY_FILE", "key file, made on first use with mode 0600", EVERYWHERE,
        default_factory=lambda data: data["config_home"] / "biomem" / "key",
        shown="`$XDG_CONFIG_HOME/biomem/key`", argument="`biomem rekey --key-file`")
    cache: Annotated[Path, _parsed(lambda text: Path(text) / "biomem")] = _setting(
        "XDG_CACHE_HOME", "caches, in `$XDG_CACHE_HOME/biomem`: `onnx/` the text encoder's onnxruntime export "
        "(made from the loaded model on first use), `locomo/` LoCoMo data and cached ingestions of "
        "`biomem eval locomo`", EVERYWHERE, default_factory=lambda: Path.home() / ".cache" / "biomem",
        shown="`~/.cache`", argument="`TextEncoder(onnx_cache=)`, `--cache-dir`")
    on_space: Annotated[bool, _parsed(bool)] = _setting(
        "SPACE_ID", "set by Hugging Face on a Space: the defaults marked \"on a Space\"", EVERYWHERE, False,
        shown="unset")
    palm_encoder: str = _setting(
        "BIOMEM_PALM_ENCODER", "palm encoder of the demo's synthetic palms", (APP, SERVE), "palm-compcode")
    load_demo: Flag = _setting(
        "BIOMEM_LOAD_DEMO", "build the demo at start-up if the store is empty", (APP, SERVE), False)
    admin: Flag = _setting(
        "BIOMEM_ADMIN", "allow server-side actions: LoCoMo import from a path, folder calibration, storing τ "
        "(no launch path turns it on)", (APP, SERVE), False)
    trust_proxy: Flag = _setting(
        "BIOMEM_TRUST_PROXY", "client address (for attempt limits) from the last `X-Forwarded-For` hop (off: the "
        "socket's peer, whatever that header says)", (APP, SERVE), False)
    space_host: HostNames = _setting(
        "SPACE_HOST", "set by Hugging Face on a Space: its own name, allowed besides `BIOMEM_ALLOWED_HOSTS`",
        (APP, SERVE), ())
    allowed_hosts: HostNames = _setting(
        "BIOMEM_ALLOWED_HOSTS", "names besides `localhost`, `127.0.0.1`, `[::1]`, the bind address (unless "
        "`0.0.0.0`) and `SPACE_HOST` that the page, and a keyless REST caller, may be reached by, "
        "comma-separated: any other Host or Origin is refused (DNS rebinding, cross-site posts; see Security "
        "model)", (APP, SERVE), (), validate_default=True)
    locomo: str = _setting("BIOMEM_LOCOMO", "path offered for the LoCoMo import", (APP, SERVE), "")
    log_level: Annotated[str, _parsed(_log_level)] = _setting("BIOMEM_LOG", "log level", (APP, SERVE), "INFO")
    host: str = _setting("GRADIO_SERVER_NAME", "bind address", (APP, SERVE), "127.0.0.1")
    port: Annotated[int, _parsed(_port)] = _setting(
        AliasChoices("GRADIO_SERVER_PORT", "PORT"), "HTTP port (the first one set)", (APP, SERVE), 7860)

    @model_validator(mode="before")
    @classmethod
    def _space_defaults(cls, data: Any) -> Any:
        """On a Hugging Face Space (SPACE_ID set) the unset variables of SPACE_DEFAULTS take their Space value."""
        if not isinstance(data, dict) or not str(data.get("SPACE_ID", "")).strip():
            return data
        space = {cls.model_fields[name].validation_alias: value for name, value in SPACE_DEFAULTS.items()}
        return {**space, **data}

    @field_validator("allowed_hosts")
    @classmethod
    def _and_the_spaces_own_name(cls, hosts: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """The Space's own name is always allowed, whatever BIOMEM_ALLOWED_HOSTS adds."""
        return (*hosts, *info.data.get("space_host", ()))

    @_modalities_reads("BIOMEM_WEIGHTS", "folder of hand-placed or converted encoder weights (read by `modalities`)",
                       "`weights`")
    @property
    def weights(self) -> Path:
        return modalities.weights.weights_dir()

    @_modalities_reads("BIOMEM_CCNET_WEIGHTS", "CCNet palm checkpoint (read by `modalities`)",
                       "`ccnet.pth` in the weights folder", "`CCNetEncoder(weights=)`")
    @property
    def ccnet_weights(self) -> str:
        return modalities.ccnet.default_weights()

    @_modalities_reads("HF_HUB_OFFLINE", "no Hugging Face Hub downloads: models from the cache or pip packages "
                       "(read by `modalities`)", "off")
    @property
    def hub_offline(self) -> bool:
        return modalities.weights.hub_offline()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Every setting from `environ` (default os.environ, through pydantic-settings' environment source);
        a bad value is an InvalidInputError naming its variable."""
        try:
            if environ is None:
                return cls()
            return cls.model_validate({name: value for name, value in environ.items() if value != ""})
        except ValidationError as exc:
            raise _invalid(exc, os.environ if environ is None else environ) from None


def _invalid(exc: ValidationError, env: Mapping[str, str]) -> InvalidInputError:
    """The first bad value as `NAME='value': reason`, naming the variable set (of a field's choices, the one read)."""
    error = exc.errors()[0]
    field = next(field for field, names in variables().items() if error["loc"][0] in names)
    name = next(name for name in variables()[field] if env.get(name))
    return InvalidInputError(f"{name}={env[name]!r}: {error.get('ctx', {}).get('error', error['msg'])}")


def variables() -> dict[str, tuple[str, ...]]:
    """The environment variables of each field, the first set winning (a computed field's: what `modalities` reads)."""
    named: dict[str, tuple[str, ...]] = {}
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias
        named[name] = tuple(alias.choices) if isinstance(alias, AliasChoices) else (alias,)
    for name, computed in Settings.model_computed_fields.items():
        named[name] = (computed.json_schema_extra["variable"],)
    return named


def _shown(value: Any) -> str:
    """A default as the table shows it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value in ("", ()):
        return "none"
    return f"`{value.get_secret_value() if isinstance(value, SecretStr) else value}`"


def _default(name: str, info: FieldInfo | ComputedFieldInfo) -> str:
    """The default column of field `name`: its `shown` text or its default, and its value on a Space."""
    shown = info.json_schema_extra["shown"] or _shown(info.default)
    return f"{shown} ({_shown(SPACE_DEFAULTS[name])} on a Space)" if name in SPACE_DEFAULTS else shown


def markdown_table() -> str:
    """The configuration table of docs/configuration.md, one row per field, from the fields."""
    rows = ["| variable | meaning | default | used by | argument |",
            "|---|---|---|---|---|"]
    named = variables()
    for name, info in {**Settings.model_fields, **Settings.model_computed_fields}.items():
        extra = info.json_schema_extra
        rows.append(f"| {', '.join(f'`{variable}`' for variable in named[name])} | {info.description} "
                    f"| {_default(name, info)} | {', '.join(extra['surfaces'])} | {extra['argument'] or '—'} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
