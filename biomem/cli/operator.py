"""The operator's commands: stats, rekey, migrate, calibrate, encoders, samples, demo, serve and keys."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..errors import AuthenticationError, InvalidInputError
from ..settings import Settings
from ..stopping import stopped_by_signals
from .common import memory, print_json, store_exists


def cmd_rekey(args: argparse.Namespace) -> None:
    """Re-seal every template under a new key, then write that key where the old one was read."""
    from ..stores.sealing import encode_key, new_key, write_key

    key = new_key()
    target = Path(args.key_file).expanduser() if args.key_file else args.settings.key_file
    partial = target.with_name(target.name + ".new")
    write_key(partial, key)  # kept beside the old key until the database holds the new seal
    try:
        with memory(args) as mem:
            mem.store.rekey(key)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    print(f"re-sealed every template of {args.db} under a new key, written to {target}")
    if args.settings.key:
        print(f"BIOMEM_KEY is set: replace its value with the new key ({encode_key(key)[:4]}…) from {target}")


def cmd_stats(args: argparse.Namespace) -> None:
    with memory(args) as mem:
        print_json(mem.stats())


def cmd_migrate(args: argparse.Namespace) -> None:
    """Copy every row of one store into an empty other and print each table's checked count."""
    from ..stores.copying import copy_store

    checks = copy_store(args.source, args.target, settings=args.settings)
    for check in checks:
        print(f"{check.table:<11} {check.rows:>9} rows  sha256 {check.checksum[:16]}")
    print(f"copied and checked {sum(c.rows for c in checks)} rows: every table's count and checksum match")


def cmd_calibrate(args: argparse.Namespace) -> None:
    from ..identity import calibration_plot
    from ..identity.calibrate import calibrate_folder, save

    report = calibrate_folder(args.modality, args.data, pairs=args.pairs, fmr=args.fmr)
    if args.plot:
        print(f"histograms and DET curve: {calibration_plot.plot(report, args.plot)}")
    if not (args.save or store_exists(args.db)):
        print(report.table())  # no store to size the FPIR columns for, and calibrating makes none
        return
    with memory(args) as mem:
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

    print_json([info.as_dict() for info in modalities.available()])


def cmd_samples(args: argparse.Namespace) -> None:
    from ..identity.samples import write_face_set

    root = write_face_set(args.folder, captures=args.captures)
    people = sorted(p.name for p in root.iterdir() if p.is_dir())
    print(f"wrote {len(people)} people ({args.captures} captures per photo) to {root}; "
          f"calibrate with: biomem calibrate --modality face-arcface-s --data {root}")


def cmd_demo(args: argparse.Namespace) -> None:
    from ..engine.demo import run_demo

    run_demo(args.db)


def cmd_serve(args: argparse.Namespace) -> None:
    """REST at /v1, MCP at /mcp and the page at / over --db, with uvicorn, until SIGTERM or SIGINT (Ctrl-C);
    every way out closes the store (its SQLite write-ahead log checkpointed and removed)."""
    with stopped_by_signals():
        _serve(args)


def _serve(args: argparse.Namespace) -> None:
    from ..engine.keys import any_keys
    from ..server.auth import loopback
    from ..stores import open_store

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

    from ..engine.memory import BioMemory
    from ..server.app import create_app, uvicorn_config

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
    from ..engine.keys import create_key, list_keys, revoke_key
    from ..stores import open_store

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
            print_json(list_keys(store))
        elif not revoke_key(store, args.id):
            raise InvalidInputError(f"no unrevoked key {args.id} (biomem keys list shows them)")
        else:
            print(f"revoked key {args.id}: it is refused from now on")
    finally:
        store.close()


def add_store_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def add_calibrate_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def add_sample_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """samples and demo: the sample faces shipped here, as a calibration set or a demonstration."""
    p = sub.add_parser("samples", help="write the sample faces available offline as a calibration set")
    p.add_argument("folder", help="written as folder/person-NN/<photo>-<capture>.png")
    p.add_argument("--captures", type=int, default=8, help="the photo plus augmented captures of it, per photo")
    p.set_defaults(func=cmd_samples)
    sub.add_parser("demo", help="enrol sample faces, add memories, ask as owner and stranger") \
        .set_defaults(func=cmd_demo)


def add_service_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser], settings: Settings) -> None:
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
