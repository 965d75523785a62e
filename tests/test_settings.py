"""One configuration: every environment variable is read, checked and documented in biomem.settings.

The table in docs/configuration.md is generated from the settings, each variable does what the
table says where it says (engine, CLI, app), a bad value is one clear error naming the variable, and
no other module reads a variable on its own.
"""

import ast
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic.fields import ComputedFieldInfo
from pydantic_core import PydanticUndefined

import modalities.ccnet
import modalities.weights
from biomem.cli import build_parser, main
from biomem.engine.memory import DEFAULT_ENCODER, BioMemory
from biomem.errors import DisclosureError, InvalidInputError, KeyUnavailableError, ModelUnavailableError
from biomem.notes.textenc import TextEncoder
from biomem.settings import DEFAULT_TEXT_MODEL, SPACE_DEFAULTS, Settings, markdown_table, variables
from biomem.stores.sealing import encode_key, new_key
from biomem.vocabulary import AttemptLimits

ROOT = Path(__file__).resolve().parent.parent
SURFACES = {"engine", "CLI", "app", "serve"}


def settings(**env: str) -> Settings:
    """Settings of this process's environment (the tests' throw-away key folder) plus `env`."""
    return Settings.from_env({**os.environ, **env})


def documented() -> dict[str, str]:
    """Every variable of the table, with the field that reads it."""
    return {name: field for field, names in variables().items() for name in names}


def rows() -> dict[str, list[str]]:
    """The table's cells by field, in the order of `variables()`."""
    lines = markdown_table().splitlines()[2:]
    return {field: line[2:-2].split(" | ") for field, line in zip(variables(), lines)}


# ---- the table ------------------------------------------------------------------------------------


def test_the_docs_table_is_the_generated_one():
    page = (ROOT / "docs" / "configuration.md").read_text()
    start, end = "<!-- settings-table:start -->\n", "<!-- settings-table:end -->"
    assert page.count(start) == 1 and page.count(end) == 1
    section = page[page.index("## Environment variables"):]
    assert section.index(start) < section.index("\n## ")  # in "## Environment variables", nowhere else
    assert page[page.index(start) + len(start):page.index(end)] == markdown_table()
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    text = "".join(p.read_text() for p in pages).replace(markdown_table(), "", 1)
    assert "| variable | meaning | default |" not in text  # no second table, here or in any other page


def test_python_m_biomem_settings_prints_the_table():
    printed = subprocess.run([sys.executable, "-m", "biomem.settings"], capture_output=True, text=True,
                             check=True, cwd=ROOT).stdout
    assert printed == markdown_table()


def test_every_setting_documents_its_variables_meaning_default_and_surfaces():
    fields = {**Settings.model_fields, **Settings.model_computed_fields}
    assert list(variables()) == list(fields) and len(markdown_table().splitlines()) == len(fields) + 2
    for name, info in fields.items():
        assert variables()[name] and all(v == v.upper() for v in variables()[name]), name
        assert info.description and info.json_schema_extra["surfaces"], name
        assert set(info.json_schema_extra["surfaces"]) <= SURFACES, name
        plain = not isinstance(info, ComputedFieldInfo) and info.default is not PydanticUndefined
        assert info.json_schema_extra["shown"] or plain, f"{name}: a computed default needs its shown text"
    assert len(documented()) == sum(map(len, variables().values()))  # one field each


def test_the_table_shows_each_fields_own_default():
    """The default column is made from the fields: a plain default as it is, the Space's beside it."""
    defaults = Settings.from_env({})
    cells = rows()
    assert cells["openai_api_key"][0] == "`OPENAI_API_KEY`"
    assert cells["openai_api_key"][2] == f"`{defaults.openai_api_key.get_secret_value()}`" == "`not-needed`"
    for name in ("db", "llm", "policy", "text_model", "log_level", "port", "prompt_tokens", "target_fpir"):
        assert cells[name][2] == f"`{getattr(defaults, name)}`", name
    assert cells["port"][0] == "`GRADIO_SERVER_PORT`, `PORT`"
    assert (cells["admin"][2], cells["allowed_hosts"][2]) == ("off", "none")
    on_space = Settings.from_env({"SPACE_ID": "x"})
    for name in SPACE_DEFAULTS:
        assert getattr(on_space, name) == SPACE_DEFAULTS[name] != getattr(defaults, name), name
    assert cells["disclosure"][2] == "`private` (`demo` on a Space)"
    assert cells["load_demo"][2] == "off (on on a Space)"


def test_the_defaults_shown_for_computed_defaults_are_the_engines():
    shown = {name: cells[2] for name, cells in rows().items()}
    assert DEFAULT_ENCODER in shown["encoder"] and DEFAULT_TEXT_MODEL in shown["text_model"]
    limits = Settings.from_env({}).attempts
    assert shown["attempts"].startswith(f"`{limits.misses}/{limits.window:g}/{limits.cooldown:g}`")


def test_every_biomem_variable_named_in_the_code_is_in_the_table():
    named = set()
    for path in [*(ROOT / "biomem").rglob("*.py"), *(ROOT / "modalities").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isupper() \
                    and node.value.startswith("BIOMEM_") and node.value.isidentifier():
                named.add(node.value)
    assert named and named <= set(documented())


# ---- parsing --------------------------------------------------------------------------------------


def test_secrets_stay_out_of_repr():
    key = encode_key(new_key())
    url = "postgresql://bio:hunter2@db.lan/bio"
    configured = settings(BIOMEM_KEY=key, OPENAI_API_KEY="sk-secret-123", BIOMEM_DB=url)
    shown = repr(configured)
    assert key not in shown and "sk-secret-123" not in shown and "hunter2" not in shown and "policy=" in shown
    assert configured.key.get_secret_value() == key and configured.db == url
    assert configured.openai_api_key.get_secret_value() == "sk-secret-123"


def test_the_process_environment_reads_as_the_same_mapping_passed(monkeypatch):
    """from_env() reads os.environ through pydantic-settings, from_env(mapping) validates the mapping: one result."""
    for name, value in {"PORT": "8000", "BIOMEM_TAU": "0.5,palm-compcode=0.3", "BIOMEM_ATTEMPTS": "off",
                        "SPACE_ID": "someone/bio-memory", "SPACE_HOST": "someone-bio-memory.hf.space",
                        "BIOMEM_ALLOWED_HOSTS": "kiosk.lan", "BIOMEM_ADMIN": "yes", "BIOMEM_ENCODER": "",
                        "XDG_CONFIG_HOME": "/etc/xdg", "BIOMEM_DB": " spaced.db "}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("BIOMEM_KEY_FILE", raising=False)
    read = Settings.from_env()
    assert read == Settings.from_env(dict(os.environ))
    assert (read.port, read.tau, read.attempts, read.admin, read.encoder, read.db) == \
        (8000, {None: 0.5, "palm-compcode": 0.3}, None, True, None, "spaced.db")
    assert read.allowed_hosts == ("kiosk.lan", "someone-bio-memory.hf.space") and read.disclosure == "demo"
    assert read.key_file == Path("/etc/xdg/biomem/key")
    monkeypatch.setenv("PORT", "0")
    for reading in (Settings.from_env, lambda: Settings.from_env(dict(os.environ))):
        with pytest.raises(InvalidInputError, match="^PORT='0': a port is"):
            reading()


def test_a_copy_overrides_settings_without_reading_the_environment():
    given = Settings.from_env({}).model_copy(update={"host": "0.0.0.0", "policy": "all"})
    assert (given.host, given.policy, given.port) == ("0.0.0.0", "all", 7860)


@pytest.mark.parametrize(("name", "value"), [
    ("BIOMEM_POLICY", "foo"), ("BIOMEM_DISCLOSURE", "public"), ("BIOMEM_LLM", "gpt-4o"),
    ("BIOMEM_ATTEMPTS", "often"), ("BIOMEM_ATTEMPTS", "20/0"), ("BIOMEM_TAU", "face-arcface-s=high"),
    ("BIOMEM_TAU", "=0.4"), ("BIOMEM_TAU", "1.5"), ("BIOMEM_TAU", "0.4,0.5"), ("BIOMEM_ADMIN", "maybe"),
    ("BIOMEM_LOAD_DEMO", "2"), ("BIOMEM_TRUST_PROXY", "yes please"), ("BIOMEM_LOG", "loud"),
    ("GRADIO_SERVER_PORT", "http"), ("PORT", "0"), ("PORT", "70000"),
])
def test_a_bad_value_is_an_invalid_input_error_naming_the_variable(name, value):
    with pytest.raises(InvalidInputError, match=f"^{name}="):
        settings(**{name: value})


def test_booleans_take_words_and_default_on_a_space():
    assert all(settings(BIOMEM_ADMIN=word).admin for word in ("1", "true", "YES", "on"))
    assert not any(settings(BIOMEM_ADMIN=word).admin for word in ("0", "false", "No", "off"))
    off_space = Settings.from_env({})
    on_space = Settings.from_env({"SPACE_ID": "someone/bio-memory"})
    assert not off_space.on_space and on_space.on_space
    assert (off_space.load_demo, off_space.trust_proxy, off_space.admin) == (False, False, False)
    assert (on_space.load_demo, on_space.trust_proxy, on_space.admin) == (True, True, False)
    assert (off_space.disclosure, on_space.disclosure) == ("private", "demo")
    assert (off_space.host, on_space.host) == ("127.0.0.1", "0.0.0.0")
    overridden = Settings.from_env({"SPACE_ID": "x", "BIOMEM_LOAD_DEMO": "0", "BIOMEM_DISCLOSURE": "private",
                                    "GRADIO_SERVER_NAME": "127.0.0.1", "BIOMEM_TRUST_PROXY": "off"})
    assert (overridden.load_demo, overridden.disclosure, overridden.host, overridden.trust_proxy) == \
        (False, "private", "127.0.0.1", False)
    assert Settings.from_env({"SPACE_ID": ""}).on_space is False  # empty counts as unset


def test_port_is_gradio_server_port_then_port_then_7860():
    assert Settings.from_env({}).port == 7860
    assert Settings.from_env({"PORT": "8000"}).port == 8000
    assert Settings.from_env({"PORT": "8000", "GRADIO_SERVER_PORT": "9000"}).port == 9000


def test_tau_is_parsed_per_encoder_with_a_bare_number_for_the_default_encoder():
    assert settings().tau == {}
    assert settings(BIOMEM_TAU="face-arcface-s=0.43, palm-compcode=0.3").tau == \
        {"face-arcface-s": 0.43, "palm-compcode": 0.3}
    assert settings(BIOMEM_TAU="0.5,palm-compcode=-0.1").tau == {None: 0.5, "palm-compcode": -0.1}


def test_attempts_off_or_limits():
    assert settings().attempts == AttemptLimits()
    assert settings(BIOMEM_ATTEMPTS="off").attempts is None
    assert settings(BIOMEM_ATTEMPTS="5/60/30").attempts == AttemptLimits(5, 60.0, 30.0)


def test_the_modalities_variables_are_shown_as_modalities_reads_them(monkeypatch, tmp_path):
    monkeypatch.setenv("BIOMEM_WEIGHTS", str(tmp_path / "w"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("BIOMEM_CCNET_WEIGHTS", raising=False)
    shown = Settings.from_env()
    assert shown.weights == modalities.weights.weights_dir() == tmp_path / "w"
    assert shown.ccnet_weights == modalities.ccnet.default_weights() == str(tmp_path / "w" / "ccnet.pth")
    assert shown.hub_offline is True
    monkeypatch.setenv("BIOMEM_CCNET_WEIGHTS", str(tmp_path / "net_params_best.pth"))
    assert Settings.from_env().ccnet_weights == str(tmp_path / "net_params_best.pth")


def test_the_caches_and_key_file_follow_xdg(monkeypatch, tmp_path):
    from biomem.eval.locomo_data import default_cache_dir
    from biomem.notes.textenc import default_onnx_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_cache_dir() == tmp_path / "cache" / "biomem" / "locomo"
    assert default_onnx_cache(Settings.from_env()) == tmp_path / "cache" / "biomem" / "onnx"
    assert settings(BIOMEM_KEY_FILE="", XDG_CONFIG_HOME=str(tmp_path)).key_file == tmp_path / "biomem" / "key"
    assert settings(BIOMEM_KEY_FILE=str(tmp_path / "k")).key_file == tmp_path / "k"


# ---- each variable where the table says -----------------------------------------------------------


def test_the_engine_takes_its_defaults_from_the_environment(monkeypatch, make_memory):
    monkeypatch.setenv("BIOMEM_ATTEMPTS", "off")
    monkeypatch.setenv("BIOMEM_DISCLOSURE", "demo")
    monkeypatch.setenv("BIOMEM_ENCODER", "palm-compcode")
    mem = make_memory("env.db", encoder=None)
    assert mem.limiter.limits is None and mem.disclosure == "demo" and mem.modality == "palm-compcode"
    explicit = make_memory("explicit.db", encoder=None, limits="3/60", disclosure="private")
    assert explicit.limiter.limits == AttemptLimits(3, 60.0) and explicit.disclosure == "private"


def test_the_engine_takes_a_settings_object_instead_of_the_environment(monkeypatch, make_memory):
    monkeypatch.delenv("BIOMEM_ATTEMPTS", raising=False)
    mem = make_memory("given.db", settings=settings(BIOMEM_ATTEMPTS="2/10"))
    assert mem.limiter.limits == AttemptLimits(2, 10.0)


def test_the_engine_finds_the_template_key_through_the_settings_given(make_memory, face_probe):
    key = new_key()
    with_key = settings(BIOMEM_KEY=encode_key(key))
    mem = make_memory("sealed.db", settings=with_key)
    mem.enroll("Ana", [face_probe(0, 0)])
    mem.close()
    assert make_memory("sealed.db", key=key).identities()[0].label == "Ana"
    with pytest.raises(KeyUnavailableError):
        make_memory("sealed.db", settings=settings(BIOMEM_KEY=encode_key(new_key())))


def test_the_text_model_comes_from_biomem_text_model(monkeypatch, tmp_path):
    monkeypatch.setenv("BIOMEM_TEXT_MODEL", "acme/not-there")
    with pytest.raises(ModelUnavailableError, match="acme/not-there"):
        TextEncoder(cache_dir=tmp_path / "empty-hub")


def test_the_cli_uses_biomem_policy_disclosure_encoder_and_tau(monkeypatch, tmp_path, capsys):
    db = tmp_path / "cli.db"
    monkeypatch.setenv("BIOMEM_DB", str(db))
    monkeypatch.setenv("BIOMEM_POLICY", "all")
    monkeypatch.setenv("BIOMEM_DISCLOSURE", "demo")
    monkeypatch.setenv("BIOMEM_ENCODER", "palm-compcode")
    monkeypatch.setenv("BIOMEM_TAU", "0.31, face-arcface-s=0.45")
    assert main(["stats"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["path"] == str(db) and stats["policy"] == "all" and stats["disclosure"] == "demo"
    assert stats["default_modality"] == "palm-compcode"
    assert stats["modalities"] == {"face-arcface-s": 0.45, "palm-compcode": 0.31}


def test_cli_options_win_over_their_variables():
    parser = build_parser(settings(BIOMEM_POLICY="all", BIOMEM_DB="env.db", BIOMEM_LLM="hf:tiny"))
    from_env = parser.parse_args(["stats"])
    assert (from_env.policy, from_env.db, from_env.llm) == ("all", "env.db", "hf:tiny")
    given = parser.parse_args(["--policy", "best", "--db", "given.db", "--llm", "offline", "stats"])
    assert (given.policy, given.db, given.llm) == ("best", "given.db", "offline")


def test_a_bad_variable_stops_the_cli_with_one_line_and_status_2(monkeypatch, capsys):
    monkeypatch.setenv("BIOMEM_POLICY", "foo")
    assert main(["stats"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("biomem: InvalidInputError: BIOMEM_POLICY='foo'")


def test_from_settings_serves_private_on_a_real_store_and_stores_tau(tmp_path, make_memory, face_probe,
                                                                      text_encoder, face_encoder, caplog):
    real = make_memory("real.db")
    real.enroll("Rhiannon", [face_probe(3, 0)])  # a real person: no demo disclosure on this store
    real.close()
    configured = settings(BIOMEM_DB=str(tmp_path / "real.db"), BIOMEM_DISCLOSURE="demo", BIOMEM_POLICY="all",
                          BIOMEM_TAU="0.52,palm-compcode=0.3")
    with caplog.at_level(logging.WARNING, logger="biomem.engine.memory"):
        mem = BioMemory.from_settings(configured, text_model=text_encoder, encoder=face_encoder)
    try:
        assert mem.disclosure == "private" and "private disclosure" in caplog.text
        assert mem.policy == "all"
        assert mem.store.threshold("face-arcface-s") == (0.52, "env BIOMEM_TAU")
        assert mem.store.threshold("palm-compcode") == (0.3, "env BIOMEM_TAU")
    finally:
        mem.close()
    with pytest.raises(DisclosureError):  # asked for in code, demo is still refused
        make_memory("real.db", disclosure="demo")


# ---- nobody else reads the environment ------------------------------------------------------------

ENVIRON = ("os.environ", "environ")


def environ_reads(source: str) -> list[str | None]:
    """Names a module reads from os.environ or os.getenv: literals, module constants, else None."""
    tree = ast.parse(source)
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) for t in n.targets if isinstance(t, ast.Name)}

    def name(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant):
            return node.value
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in (
                "os.getenv", *(f"{e}.{m}" for e in ENVIRON for m in ("get", "setdefault", "pop"))):
            reads.append(name(node.args[0]))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and ast.unparse(node.value) in ENVIRON:
            reads.append(name(node.slice))
        elif isinstance(node, ast.Compare) and any(ast.unparse(c) in ENVIRON for c in node.comparators):
            reads.append(name(node.left))
    return reads


def test_the_reader_check_sees_every_way_of_reading():
    source = ('import os\nNAME = "BIOMEM_E"\nos.environ.get("BIOMEM_A")\nos.environ["BIOMEM_B"]\n'
              'os.getenv("PORT")\n"BIOMEM_C" in os.environ\nos.environ.get(NAME)\nos.environ.get(f"X{1}")\n'
              'os.environ["GRADIO_X"] = "1"\n')
    assert sorted(map(str, environ_reads(source))) == ["BIOMEM_A", "BIOMEM_B", "BIOMEM_C", "BIOMEM_E", "None", "PORT"]


def test_no_module_but_settings_reads_a_documented_or_biomem_variable():
    table = set(documented())
    for path in (ROOT / "biomem").rglob("*.py"):
        if path.name == "settings.py" and path.parent.name == "biomem":
            continue
        for read in environ_reads(path.read_text()):
            assert read is not None, f"{path}: reads a variable whose name the check cannot tell"
            assert not read.startswith("BIOMEM_") and read not in table, f"{path} reads {read} itself"


def test_modalities_reads_its_three_variables_once_each():
    """modalities imports nothing from biomem: it keeps one reader each, which the settings call."""
    reads = [read for path in (ROOT / "modalities").rglob("*.py") for read in environ_reads(path.read_text())]
    own = ("BIOMEM_WEIGHTS", "BIOMEM_CCNET_WEIGHTS", "HF_HUB_OFFLINE")
    assert {name: reads.count(name) for name in own} == dict.fromkeys(own, 1)
    assert not {read for read in reads if read and read.startswith("BIOMEM_")} - set(own)
