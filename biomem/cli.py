"""The `biomem` command: enrol, remember, ask, search, forget and inspect one database file.

    biomem enroll alice alice1.jpg alice2.jpg
    biomem add "My PIN is 1234" --probe alice3.jpg
    biomem ask "What is my PIN?" --probe alice3.jpg
    biomem group create Home --probe alice3.jpg; biomem group join 4 --probe alice3.jpg --member-probe bob.jpg
    biomem add "The Wi-Fi password is sunflower" --probe alice3.jpg --scope 4
    biomem forget --probe alice4.jpg
    biomem keys create kiosk --role agent; biomem serve --host 0.0.0.0
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import AuthenticationError, BioMemError, InvalidInputError
from .eval import add_eval_parser
from .settings import Settings
from .stopping import stopped_by_signals
from .stores.records import Group


def _memory(args: argparse.Namespace):  # noqa: ANN202 - BioMemory, imported lazily (torch is slow)
    """The BioMemory of the settings, with --db, --encoder, --llm and --policy over them."""
    from .engine.memory import BioMemory

    return BioMemory.from_settings(args.settings.model_copy(update={
        "db": args.db, "encoder": args.encoder, "llm": args.llm, "policy": args.policy}))


def _store_exists(db: str) -> bool:
    """Whether --db names a store that is there already: a PostgreSQL URL, or an SQLite file on disk."""
    from .stores import is_postgres, sqlite_path

    return is_postgres(db) or sqlite_path(db).exists()


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def cmd_enroll(args: argparse.Namespace) -> None:
    with _memory(args) as mem:
        samples: dict[str, list[str]] = {args.modality or mem.modality: list(args.images)}
        for modality, path in _also(args):
            samples.setdefault(modality, []).append(path)
        identity = mem.enroll(args.label, samples)
        print(f"enrolled {identity.label!r} as identity {identity.id} ("
              + ", ".join(f"{len(paths)} sample(s) of {name}" for name, paths in samples.items()) + ")")


def _also(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The --also MODALITY=IMAGE pairs: captures of another kind than the first (a palm beside the face)."""
    pairs = []
    for given in args.also:
        modality, _, path = given.partition("=")
        if not modality or not path:
            raise InvalidInputError(f"--also takes MODALITY=IMAGE (a palm beside the face), got {given!r}")
        pairs.append((modality, path))
    return pairs


def _probe(args: argparse.Namespace, modality: str) -> Any:
    """The requester's probe: --probe alone, or {modality: image} with the --also images of other kinds (a
    look-alike relative's face and palm)."""
    pairs = _also(args)
    if not pairs or args.probe is None:
        return args.probe
    probe = {modality: args.probe}
    for name, path in pairs:
        if name in probe:
            raise InvalidInputError(f"one image per kind of probe: {name} is given twice")
        probe[name] = path
    return probe


def _json_argument(text: str) -> Any:
    """A JSON command-line value (--metadata, --filters); InvalidInputError when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"not JSON: {text!r} ({exc.msg})") from None


def cmd_add(args: argparse.Namespace) -> None:
    with _memory(args) as mem:
        note = mem.add(args.text, identity=args.identity, probe=_probe(args, mem.modality), timestamp=args.timestamp,
                       scope=args.scope, hidden_from=args.hidden_from,
                       metadata=_json_argument(args.metadata) if args.metadata else None)
        _print_json(note.as_dict())


def cmd_search(args: argparse.Namespace) -> None:
    with _memory(args) as mem:
        _print_json(mem.search(args.query, probe=_probe(args, mem.modality), k=args.k, threshold=args.threshold,
                               filters=_json_argument(args.filters) if args.filters else None).as_dict())


def cmd_group(args: argparse.Namespace) -> None:
    """Households: found, join, leave, list or delete one (a member's probe, or the operator's ids)."""
    with _memory(args) as mem:
        who = {"probe": args.probe} if args.probe else {}
        if args.group_command == "create":
            result: Any = mem.create_group(args.label, identity=args.identity, **who)
        elif args.group_command == "join":
            result = mem.add_member(args.group, identity=args.identity, member_probe=args.member_probe, **who)
        elif args.group_command == "leave":
            result = mem.remove_member(args.group, args.member, operator=args.operator, **who)
        elif args.group_command == "list":
            result = mem.groups(identity=args.identity, **who)
        else:
            result = mem.delete_group(args.group, operator=args.operator, **who)
        if isinstance(result, list):
            _print_json([group.as_dict() for group in result])
        elif isinstance(result, Group):
            _print_json(result.as_dict())
        else:  # deleted, or its last member left
            _print_json({"deleted": args.group})


def cmd_ask(args: argparse.Namespace) -> None:
    with _memory(args) as mem:
        answer = mem.ask(args.question, probe=_probe(args, mem.modality), k=args.k)
        view = answer.as_dict()
        if view["gate"]["matched"]:
            print(f"[gate: {view['gate']['label']}; {len(answer.notes)} note(s) in, "
                  f"{view['gated_out']['total']} kept out]")
        else:
            print("[gate: no match (no memory context)]")
        print(answer.text)


def cmd_forget(args: argparse.Namespace) -> None:
    with _memory(args) as mem:
        erased = mem.forget(probe=_probe(args, mem.modality), identity=args.identity)
        print(f"forgot identity {erased}: notes, links, history, templates and index entries")


def cmd_rekey(args: argparse.Namespace) -> None:
    """Re-seal every template under a new key, then write that key where the old one was read."""
    from .stores.sealing import encode_key, new_key, write_key

    key = new_key()
    target = Path(args.key_file).expanduser() if args.key_file else args.settings.key_file
    partial = target.with_name(target.name + ".new")
    write_key(partial, key)  # kept beside the old key until the database holds the new seal
    try:
        with _memory(args) as mem:
            mem.store.rekey(key)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    print(f"re-sealed every template of {args.db} under a new key, written to {target}")
    if args.settings.key:
        print(f"BIOMEM_KEY is set: replace its value with the new key ({encode_key(key)[:4]}…) from {target}")


def cmd_stats(args: argparse.Namespace) -> None:
    with _memory(args) as mem:
        _print_json(mem.stats())


def cmd_migrate(args: argparse.Namespace) -> None:
    """Copy every row of one store into an empty other and print each table's checked count."""
    from .stores.copying import copy_store

    checks = copy_store(args.source, args.target, settings=args.settings)
    for check in checks:
        print(f"{check.table:<11} {check.rows:>9} rows  sha256 {check.checksum[:16]}")
    print(f"copied and checked {sum(c.rows for c in checks)} rows: every table's count and checksum match")


def cmd_calibrate(args: argparse.Namespace) -> None:
    from .identity import calibration_plot
    from .identity.calibrate import calibrate_folder, save

    report = calibrate_folder(args.modality, args.data, pairs=args.pairs, fmr=args.fmr)
    if args.plot:
        print(f"histograms and DET curve: {calibration_plot.plot(report, args.plot)}")
    if not (args.save or _store_exists(args.db)):
        print(report.table())  # no store to size the FPIR columns for, and calibrating makes none
        return
    with _memory(args) as mem:
        risk = mem.identification(args.modality)
        print(report.table(enrolled=risk["enrolled"] or None, target_fpir=risk["target_fpir"]))  # and the store's N
        if args.save:
            tau = save(report, mem, which=args.save, step_up=args.step_up)
            kind = "step-up τ" if args.step_up else "τ"
            print(f"saved {kind} = {tau:.4f} ({args.save}) for {args.modality} in {args.db}")
            if not args.step_up and report.margin(tau) is not None:
                print(f"saved ambiguity margin δ = {mem.margin(args.modality):.4f} for {args.modality}")


def cmd_encoders(args: argparse.Namespace) -> None:
    import modalities

    _print_json([info.as_dict() for info in modalities.available()])


def cmd_samples(args: argparse.Namespace) -> None:
    from .identity.samples import write_face_set

    root = write_face_set(args.folder, captures=args.captures)
    people = sorted(p.name for p in root.iterdir() if p.is_dir())
    print(f"wrote {len(people)} people ({args.captures} captures per photo) to {root}; "
          f"calibrate with: biomem calibrate --modality face-arcface-s --data {root}")


def cmd_demo(args: argparse.Namespace) -> None:
    from .engine.demo import run_demo

    run_demo(args.db)


def cmd_serve(args: argparse.Namespace) -> None:
    """REST at /v1, MCP at /mcp and the page at / over --db, with uvicorn, until SIGTERM or SIGINT (Ctrl-C);
    every way out closes the store (its SQLite write-ahead log checkpointed and removed)."""
    with stopped_by_signals():
        _serve(args)


def _serve(args: argparse.Namespace) -> None:
    from .engine.keys import any_keys
    from .server.auth import loopback
    from .stores import open_store

    settings = args.settings.model_copy(update={"db": args.db, "encoder": args.encoder, "llm": args.llm,
                                                "policy": args.policy, "host": args.host, "port": args.port})
    store = open_store(settings.db, settings=settings)  # no model loaded for this check
    try:
        keyed = any_keys(store)
    finally:
        store.close()
    if not keyed and not loopback(settings.host):
        raise AuthenticationError(f"refusing to serve on {settings.host}: this store has no API key, so anyone who "
                                  f"reaches the port could use it. Create one (biomem keys create NAME --role agent) "
                                  f"or bind 127.0.0.1")
    import uvicorn

    from .engine.memory import BioMemory
    from .server.app import create_app, uvicorn_config

    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with BioMemory.from_settings(settings) as mem:
        app = create_app(mem, settings, ui=not args.no_ui, mcp=not args.no_mcp)
        if settings.load_demo and not mem.identities():
            page = getattr(app.state, "page", None)
            if page is not None:
                logging.getLogger("biomem.server").info("%s", page.biomem_app.load_demo())
        uvicorn.Server(uvicorn_config(app, settings.host, settings.port, log_level=settings.log_level.lower())).run()


def cmd_keys(args: argparse.Namespace) -> None:
    """Create, list or revoke the service's API keys (the store holds their SHA-256 only)."""
    from .engine.keys import create_key, list_keys, revoke_key
    from .stores import open_store

    store = open_store(args.db, settings=args.settings)
    try:
        if args.keys_command == "create":
            secret, key = create_key(store, args.name, args.role)
            # the secret goes to stdout alone (`> kiosk.key`); the terminal is told where it went
            where = ":" if sys.stdout.isatty() else (", was written to standard output, which is not a terminal "
                                                      "(a file or a pipe): keep it from there")
            print(f"created {key.role} key {key.id} ({key.name!r}); its secret, shown only this once{where}",
                  file=sys.stderr)
            print(secret)
        elif args.keys_command == "list":
            _print_json(list_keys(store))
        elif not revoke_key(store, args.id):
            raise InvalidInputError(f"no unrevoked key {args.id} (biomem keys list shows them)")
        else:
            print(f"revoked key {args.id}: it is refused from now on")
    finally:
        store.close()


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    """The `biomem` command line; the global options default to `settings`."""
    parser = argparse.ArgumentParser(prog="biomem", description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=settings.db, help="database file (default $BIOMEM_DB or ./biomem.db)")
    parser.add_argument("--encoder", default=settings.encoder,
                        help="default biometric encoder of a new store (default $BIOMEM_ENCODER)")
    parser.add_argument("--llm", default=settings.llm,
                        help="offline | openai:<model> | hf:<model-id> (default $BIOMEM_LLM or offline)")
    parser.add_argument("--policy", default=settings.policy, choices=["best", "all"],
                        help="gate policy (default $BIOMEM_POLICY or best)")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_memory_commands(sub)
    _add_store_commands(sub)
    _add_calibrate_command(sub)
    _add_sample_commands(sub)
    _add_service_commands(sub, settings)
    add_eval_parser(sub)
    return parser


def also(parser: argparse.ArgumentParser, why: str = "the probe of a look-alike relative, whose face alone the "
         "gate cannot tell apart") -> None:
    """The repeatable --also MODALITY=IMAGE option: a capture of another kind beside the first."""
    parser.add_argument("--also", action="append", default=[], metavar="MODALITY=IMAGE",
                        help=f"a capture of another kind, repeatable (palm-compcode=palm.png): {why}")


def _add_memory_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """enroll, add, search, ask and forget: a person and their memories."""
    p = sub.add_parser("enroll", help="create an identity from one or more images")
    p.add_argument("label")
    p.add_argument("images", nargs="+")
    p.add_argument("--modality", default=None)
    also(p, "how the operator enrols a look-alike relative whom the face alone cannot tell apart from someone")
    p.set_defaults(func=cmd_enroll)

    p = sub.add_parser("add", help="remember a text for an identity or for whoever the probe matches")
    p.add_argument("text")
    owner = p.add_mutually_exclusive_group(required=True)
    owner.add_argument("--identity", type=int)
    owner.add_argument("--probe")
    p.add_argument("--timestamp", default=None, help="ISO 8601 or '1:56 pm on 8 May, 2023'")
    p.add_argument("--scope", type=int, default=None, help="a household of the writer's to write into")
    p.add_argument("--hidden-from", type=int, nargs="+", default=[], help="member ids who never read it")
    p.add_argument("--metadata", default=None, help='a JSON object, e.g. \'{"room": "kitchen"}\'')
    also(p)
    p.set_defaults(func=cmd_add)

    for name, func, help_text in (("search", cmd_search, "gated retrieval, as JSON"),
                                  ("ask", cmd_ask, "answer from the requester's memories only")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("query" if name == "search" else "question")
        p.add_argument("--probe", required=True, help="image of the requester")
        p.add_argument("-k", type=int, default=10)
        if name == "search":
            p.add_argument("--filters", default=None,
                           help='JSON, e.g. \'{"metadata.room": "kitchen"}\' (docs/agents.md)')
            p.add_argument("--threshold", type=float, default=None, help="minimum cosine similarity of a hit")
        also(p)
        p.set_defaults(func=func)

    _add_group_commands(sub)

    p = sub.add_parser("forget", help="erase an identity and everything it owns")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--probe", help="image of the person to erase (step-up match)")
    who.add_argument("--identity", type=int, help="identity id (operator)")
    also(p)
    p.set_defaults(func=cmd_forget)


def _add_group_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """group create/join/leave/list/delete: households, by members' probes or (operator) identity ids."""
    p = sub.add_parser("group", help="households: notes several people share")
    groups = p.add_subparsers(dest="group_command", required=True)

    def requester(parser: argparse.ArgumentParser, operator: str) -> None:
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--probe", help="image of a member (step-up match)")
        if operator == "identity":
            who.add_argument("--identity", type=int, help="the person's identity id (operator)")
        else:
            who.add_argument("--operator", action="store_true", help="act as the operator")

    create = groups.add_parser("create", help="found a household; its founder is its first member")
    create.add_argument("label")
    requester(create, "identity")
    join = groups.add_parser("join", help="add a member: a member's --probe and the newcomer's --member-probe, "
                                          "or the newcomer's --identity (operator)")
    join.add_argument("group", type=int)
    join.add_argument("--member-probe", default=None, help="image of the newcomer (step-up match)")
    requester(join, "identity")
    leave = groups.add_parser("leave", help="take a member out (the last one out deletes the household)")
    leave.add_argument("group", type=int)
    leave.add_argument("member", type=int)
    requester(leave, "operator")
    listing = groups.add_parser("list", help="the requester's households and their members, as JSON")
    requester(listing, "identity")
    delete = groups.add_parser("delete", help="erase a household and its notes")
    delete.add_argument("group", type=int)
    requester(delete, "operator")
    for parser in (create, join, leave, listing, delete):
        parser.set_defaults(func=cmd_group, identity=None, operator=False, member_probe=None)


def _add_store_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """rekey, stats, migrate and encoders: the store's key, its counts, its copy elsewhere, the encoders."""
    p = sub.add_parser("rekey", help="re-seal every template under a new key (renewability)")
    p.add_argument("--key-file", default=None, help="where to write the new key (default: the key file)")
    p.set_defaults(func=cmd_rekey)

    sub.add_parser("stats", help="counts, identities, thresholds").set_defaults(func=cmd_stats)
    p = sub.add_parser("migrate", help="copy a whole store to an empty one, e.g. SQLite to PostgreSQL; "
                                       "checks counts and a checksum of every row")
    p.add_argument("source", help="sqlite:///a.db, a file path, or postgresql://user@host/db")
    p.add_argument("target", help="an empty store, same forms")
    p.set_defaults(func=cmd_migrate)
    sub.add_parser("encoders", help="the biometric encoders the registry knows, as JSON") \
        .set_defaults(func=cmd_encoders)


def _add_calibrate_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """calibrate: an encoder's τ from genuine and impostor scores on the user's data."""
    p = sub.add_parser("calibrate", help="genuine/impostor scores of an encoder on your data; τ, EER")
    p.add_argument("--modality", required=True, help="encoder name, e.g. face-arcface-s")
    p.add_argument("--data", required=True, help="identity-per-folder image set (or the root of --pairs)")
    p.add_argument("--pairs", default=None, help="pairs file: 'path_a path_b 1|0' per line")
    p.add_argument("--fmr", type=float, default=1e-3, help="target false-match rate")
    p.add_argument("--plot", default=None, help="write the score histograms and the DET curve to this PNG")
    p.add_argument("--save", choices=["intersection", "fmr"], default=None,
                   help="store τ by this rule (and the ambiguity margin δ at it) for the modality in --db")
    p.add_argument("--step-up", action="store_true",
                   help="store it as the stricter step-up τ of destructive actions (use a lower --fmr)")
    p.set_defaults(func=cmd_calibrate)


def _add_sample_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """samples and demo: the sample faces shipped here, as a calibration set or a demonstration."""
    p = sub.add_parser("samples", help="write the sample faces available offline as a calibration set")
    p.add_argument("folder", help="written as folder/person-NN/<photo>-<capture>.png")
    p.add_argument("--captures", type=int, default=8, help="the photo plus augmented captures of it, per photo")
    p.set_defaults(func=cmd_samples)
    sub.add_parser("demo", help="enrol sample faces, add memories, ask as owner and stranger") \
        .set_defaults(func=cmd_demo)


def _add_service_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser], settings: Settings) -> None:
    """serve and keys: the HTTP service (REST, MCP, the page) and who may call it."""
    p = sub.add_parser("serve", help="REST (/v1), MCP (/mcp) and the web page (/) on one port")
    p.add_argument("--host", default=settings.host, help="bind address (default $GRADIO_SERVER_NAME or 127.0.0.1; "
                   "anything but loopback needs an API key in the store)")
    p.add_argument("--port", type=int, default=settings.port, help="port (default $GRADIO_SERVER_PORT, $PORT or 7860)")
    p.add_argument("--no-ui", action="store_true", help="serve the API only, without the Gradio page")
    p.add_argument("--no-mcp", action="store_true", help="serve no MCP endpoint")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("keys", help="API keys of the service: create, list, revoke")
    keys = p.add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="a new key; prints its secret once (stdout)")
    create.add_argument("name", help="who or what uses it, e.g. kiosk")
    create.add_argument("--role", choices=["agent", "admin"], default="agent",
                        help="agent: gated calls only; admin: also import and forget by identity id")
    keys.add_parser("list", help="every key, as JSON (never a secret)")
    revoke = keys.add_parser("revoke", help="refuse a key from now on")
    revoke.add_argument("id", type=int)
    p.set_defaults(func=cmd_keys)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `biomem` console script; typed errors become one line and exit 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        settings = Settings.from_env()
    except BioMemError as exc:
        return _failed(exc)
    args = build_parser(settings).parse_args(argv)
    args.settings = settings
    args.command_line = shlex.join(["biomem", *argv])  # recorded by runs such as `biomem eval locomo`
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    try:
        args.func(args)
    except BioMemError as exc:
        return _failed(exc)
    return 0


def _failed(exc: BioMemError) -> int:
    print(f"biomem: {exc.__class__.__name__}: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
