"""`biomem enroll | add | search | ask | forget | group`: a person and their memories, by probe or (the operator)
by identity id."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InvalidInputError
from ..stores.records import Group
from .common import json_argument, memory, print_json


def cmd_enroll(args: argparse.Namespace) -> None:
    with memory(args) as mem:
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


def cmd_add(args: argparse.Namespace) -> None:
    with memory(args) as mem:
        note = mem.add(args.text, identity=args.identity, probe=_probe(args, mem.modality), timestamp=args.timestamp,
                       scope=args.scope, hidden_from=args.hidden_from,
                       metadata=json_argument(args.metadata) if args.metadata else None)
        print_json(note.as_dict())


def cmd_search(args: argparse.Namespace) -> None:
    with memory(args) as mem:
        print_json(mem.search(args.query, probe=_probe(args, mem.modality), k=args.k, threshold=args.threshold,
                               filters=json_argument(args.filters) if args.filters else None).as_dict())


def cmd_group(args: argparse.Namespace) -> None:
    """Households: found, join, leave, list or delete one (a member's probe, or the operator's ids)."""
    with memory(args) as mem:
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
            print_json([group.as_dict() for group in result])
        elif isinstance(result, Group):
            print_json(result.as_dict())
        else:  # deleted, or its last member left
            print_json({"deleted": args.group})


def cmd_ask(args: argparse.Namespace) -> None:
    with memory(args) as mem:
        answer = mem.ask(args.question, probe=_probe(args, mem.modality), k=args.k)
        view = answer.as_dict()
        if view["gate"]["matched"]:
            print(f"[gate: {view['gate']['label']}; {len(answer.notes)} note(s) in, "
                  f"{view['gated_out']['total']} kept out]")
        else:
            print("[gate: no match (no memory context)]")
        print(answer.text)


def cmd_forget(args: argparse.Namespace) -> None:
    with memory(args) as mem:
        erased = mem.forget(probe=_probe(args, mem.modality), identity=args.identity)
        print(f"forgot identity {erased}: notes, links, history, templates and index entries")


def also(parser: argparse.ArgumentParser, why: str = "the probe of a look-alike relative, whose face alone the "
         "gate cannot tell apart") -> None:
    """The repeatable --also MODALITY=IMAGE option: a capture of another kind beside the first."""
    parser.add_argument("--also", action="append", default=[], metavar="MODALITY=IMAGE",
                        help=f"a capture of another kind, repeatable (palm-compcode=palm.png): {why}")


def add_memory_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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

    add_group_commands(sub)

    p = sub.add_parser("forget", help="erase an identity and everything it owns")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--probe", help="image of the person to erase (step-up match)")
    who.add_argument("--identity", type=int, help="identity id (operator)")
    also(p)
    p.set_defaults(func=cmd_forget)


def add_group_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
