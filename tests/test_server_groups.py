"""Households over REST and the Python client, against a real server (uvicorn in a thread on 127.0.0.1), on
both stores: founding, joining in person, shared and hidden notes, filters and pages, removal and deletion,
the operator's calls by id, and a non-member who learns nothing of a household (its 404 is the 404 of an id
that never existed).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from biomem import BioMemory
from biomem.client import BioMemoryClient
from biomem.engine.demo import build_demo, demo_capture, usable_capture
from biomem.engine.keys import create_key
from biomem.errors import AuthenticationError, GroupNotFoundError, InvalidInputError, UnknownIdentityError

from .shared import ANA, BEN, CHLOE, DAN, STRANGER, b64, error_of, module_store, png, rest_service, written

SESSION = "X-Biomem-Session"
NEVER = 2**62  # a household id that never existed


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def house(request, tmp_path_factory, text_encoder, face_encoder):
    """The demo store (Ana, Ben, Chloe, enrolled as ordinary people: their probes write) and Dan, an agent and
    an admin key, served (REST only) on each store; raw calls and a client per key."""
    mem = BioMemory(module_store(request, tmp_path_factory, "groups"), text_model=text_encoder,
                    encoder=face_encoder, limits="off")
    ids = build_demo(mem, sample=False)
    ids["Dan"] = mem.enroll("Dan", [demo_capture(DAN, 0), demo_capture(DAN, 1)]).id
    keys = {role: create_key(mem.store, role, role)[0] for role in ("agent", "admin")}
    fresh = {p: usable_capture(face_encoder, p, range(10, 40)) for p in (ANA, BEN, CHLOE, DAN, STRANGER)}
    clear = {p: demo_capture(p, 0) for p in (ANA, BEN, CHLOE, DAN)}
    with rest_service(mem, ui=False, mcp=False) as (url, http), \
            BioMemoryClient(url, keys["agent"]) as bm, BioMemoryClient(url, keys["admin"]) as admin:
        def call(method: str, path: str, *, key: str | None = "agent", session: str | None = None,
                 probe: np.ndarray | None = None, member: np.ndarray | None = None, **kwargs) -> httpx.Response:
            headers = {**({"Authorization": f"Bearer {keys[key]}"} if key else {}),
                       **({SESSION: session} if session else {})}
            files = {**({"probe": ("p.png", png(probe), "image/png")} if probe is not None else {}),
                     **({"member_probe": ("m.png", png(member), "image/png")} if member is not None else {})}
            if files:
                kwargs["files"] = files
            return http.request(method, f"/v1{path}", headers=headers, **kwargs)
        yield SimpleNamespace(mem=mem, ids=ids, call=call, bm=bm, admin=admin, fresh=fresh, clear=clear,
                              png={p: png(image) for p, image in clear.items()})
    mem.close()


def found(house, person: int, query: str, **fields) -> list[dict]:
    """The notes a search as `person` (a fresh capture) returns."""
    reply = house.call("POST", "/search", json={"query": query, "k": 100, "probe": b64(png(house.fresh[person])),
                                                **fields})
    assert reply.status_code == 200, reply.text
    return reply.json()["results"]


def roster(group: dict) -> dict[int, str]:
    """A household's members as {id: label} (members joining in the same second are listed by id)."""
    return dict(zip(group["members"], group["member_labels"], strict=True))


def household(house, label: str, *members: int) -> dict:
    """A household founded by the first of `members` (step-up probe) and joined by the others in person."""
    founder, *others = members
    reply = house.call("POST", "/groups", probe=house.clear[founder], data={"label": label})
    assert reply.status_code == 201, reply.text
    group = reply.json()
    for person in others:
        reply = house.call("POST", f"/groups/{group['id']}/members", probe=house.clear[founder],
                           member=house.clear[person])
        assert reply.status_code == 200, reply.text
        group = reply.json()
    return group


# ---- the flow, end to end -------------------------------------------------------------------------------

def test_a_household_shares_notes_with_its_members_and_hides_one_from_chloe(house):
    ids = house.ids
    group = household(house, "Flat", ANA, BEN)
    assert group["label"] == "Flat" and roster(group) == {ids["Ana"]: "Ana", ids["Ben"]: "Ben"}
    joined = house.call("POST", f"/groups/{group['id']}/members", json={  # JSON probes: Ben invites Chloe
        "probe": b64(house.png[BEN]), "member_probe": b64(house.png[CHLOE])})
    assert joined.status_code == 200, joined.text
    assert roster(joined.json()) == {ids["Ana"]: "Ana", ids["Ben"]: "Ben", ids["Chloe"]: "Chloe"}
    gid = group["id"]
    mine = {g["id"]: g for g in house.call("POST", "/groups/mine", probe=house.fresh[CHLOE]).json()["results"]}
    assert mine[gid]["label"] == "Flat" and roster(mine[gid]) == roster(joined.json())

    shared = house.call("POST", "/memories", probe=house.fresh[ANA], data={
        "text": "The flat's door code is 7-1-9-3", "scope": str(gid), "metadata": json.dumps({"room": "hall"}),
        "infer": "false"})
    assert shared.status_code == 201, shared.text
    note = shared.json()["results"][0]
    assert (note["scope"], note["author"], note["owner"]) == (gid, ids["Ana"], gid)
    assert note["metadata"] == {"room": "hall"} and note["hidden_from"] == []
    hidden = house.call("POST", "/memories", json={
        "text": "The flat's gift for Chloe is hidden in the blue cupboard", "scope": gid,
        "hidden_from": [ids["Chloe"]], "metadata": {"room": "kitchen", "secret": True}, "infer": False,
        "probe": b64(png(house.fresh[BEN]))}).json()["results"][0]
    assert hidden["hidden_from"] == [ids["Chloe"]] and hidden["author"] == ids["Ben"]
    own = house.call("POST", "/memories", json={"text": "My flat key is on the red ring", "infer": False,
                                                "metadata": {"room": "hall"},
                                                "probe": b64(png(house.fresh[BEN]))}).json()["results"][0]
    assert own["scope"] is None and own["author"] == own["owner"] == ids["Ben"]

    by = {person: {n["id"]: n for n in found(house, person, "flat door code gift cupboard")}
          for person in (ANA, BEN, CHLOE, DAN)}
    assert note["id"] in by[ANA] and note["id"] in by[BEN] and note["id"] in by[CHLOE]
    assert hidden["id"] in by[ANA] and hidden["id"] in by[BEN] and hidden["id"] not in by[CHLOE]
    assert by[BEN][note["id"]]["scope"] == gid and by[BEN][note["id"]]["author"] == ids["Ana"]
    assert not {note["id"], hidden["id"], own["id"]} & set(by[DAN])  # a non-member with the same query
    assert {n["owner"] for n in by[DAN].values()} == {ids["Dan"]} or not by[DAN]
    assert found(house, STRANGER, "flat door code") == []

    # filters narrow what the gate admitted, and never widen it
    assert {n["id"] for n in found(house, BEN, "flat", filters={"scope": gid})} >= {note["id"], hidden["id"]}
    assert all(n["scope"] == gid for n in found(house, BEN, "flat", filters={"scope": gid}))
    hall = {n["id"] for n in found(house, BEN, "flat", filters={"metadata.room": "hall"})}
    assert hall == {note["id"], own["id"]}
    assert {n["id"] for n in found(house, BEN, "flat", filters={
        "AND": [{"metadata.room": "hall"}, {"NOT": {"scope": gid}}]})} == {own["id"]}
    assert {n["id"] for n in found(house, ANA, "flat", filters={"metadata.secret": True})} == {hidden["id"]}
    assert found(house, CHLOE, "flat", filters={"metadata.secret": True}) == []
    assert found(house, DAN, "flat", filters={"scope": gid}) == []
    assert found(house, DAN, "flat", filters={"OR": [{"scope": gid}, {"author": ids["Ana"]}]}) == []
    assert found(house, BEN, "flat door code", threshold=1.0) == []
    close = found(house, BEN, "The flat's door code is 7-1-9-3", threshold=0.9)
    assert [n["id"] for n in close] == [note["id"]]

    # the list-all route: filters and pages, through a broad session
    token = house.call("POST", "/sessions", probe=house.clear[BEN]).json()["session"]
    listed = house.call("GET", "/memories", session=token, params={"filters": json.dumps({"scope": gid})})
    assert [n["id"] for n in listed.json()["results"]][-2:] == [note["id"], hidden["id"]]
    assert all(n["scope"] == gid for n in listed.json()["results"])
    pages = [house.call("GET", "/memories", session=token, params={
        "filters": json.dumps({"metadata.room": {"in": ["hall", "kitchen"]}}), "page": page, "page_size": 2}).json()
        for page in (1, 2)]
    assert [n["id"] for n in pages[0]["results"]] == [note["id"], hidden["id"]]
    assert [n["id"] for n in pages[1]["results"]] == [own["id"]]
    chloe = house.call("POST", "/sessions", probe=house.clear[CHLOE]).json()["session"]
    everything = {n["id"] for n in house.call("GET", "/memories", session=chloe).json()["results"]}
    assert note["id"] in everything and hidden["id"] not in everything
    assert house.call("GET", f"/memories/{note['id']}", session=chloe).json()["memory"].startswith("The flat's")
    error_of(house.call("GET", f"/memories/{hidden['id']}", session=chloe), 404, "NoteNotFoundError")
    mine = house.call("POST", "/groups/mine", session=chloe).json()["results"]  # a session lists them too
    assert gid in {g["id"] for g in mine}


def test_a_member_leaves_or_is_removed_and_the_household_goes_with_its_last_member(house):
    ids = house.ids
    gid = household(house, "Studio", ANA, BEN, CHLOE)["id"]
    note = house.call("POST", "/memories", json={"text": "The studio's alarm code is 4040", "scope": gid,
                                                 "infer": False, "probe": b64(png(house.fresh[CHLOE]))})
    note_id = note.json()["results"][0]["id"]
    assert note_id in {n["id"] for n in found(house, CHLOE, "studio alarm code")}
    removed = house.call("DELETE", f"/groups/{gid}/members/{ids['Chloe']}", json={"probe": b64(house.png[BEN])})
    assert removed.status_code == 200, removed.text
    assert {k: v for k, v in removed.json().items() if k != "group"} == {"id": gid, "removed": ids["Chloe"],
                                                                         "deleted": False}
    assert removed.json()["group"]["id"] == gid and removed.json()["group"]["label"] == "Studio"
    assert roster(removed.json()["group"]) == {ids["Ana"]: "Ana", ids["Ben"]: "Ben"}
    assert gid not in {g["id"] for g in house.call("POST", "/groups/mine", probe=house.fresh[CHLOE]).json()["results"]}
    assert note_id not in {n["id"] for n in found(house, CHLOE, "studio alarm code")}  # the next query
    assert note_id in {n["id"] for n in found(house, ANA, "studio alarm code")}  # her note stays the household's
    error_of(house.call("DELETE", f"/groups/{gid}/members/{ids['Ana']}", probe=house.clear[CHLOE]),
             404, "GroupNotFoundError")  # no longer a member: no longer a door
    error_of(house.call("DELETE", f"/groups/{gid}/members/{ids['Ben']}", probe=house.fresh[STRANGER]),
             403, "StepUpRequiredError")
    error_of(house.call("DELETE", f"/groups/{gid}/members/{ids['Ben']}"), 403, "StepUpRequiredError")

    left = house.call("DELETE", f"/groups/{gid}/members/{ids['Ben']}", probe=house.clear[BEN]).json()
    assert left["group"]["members"] == [ids["Ana"]] and not left["deleted"]
    last = house.call("DELETE", f"/groups/{gid}/members/{ids['Ana']}", probe=house.clear[ANA]).json()
    assert last == {"id": gid, "removed": ids["Ana"], "group": None, "deleted": True}
    assert note_id not in {n["id"] for n in found(house, ANA, "studio alarm code")}

    other = household(house, "Garage", BEN, ANA)["id"]
    house.call("POST", "/memories", json={"text": "The garage remote is in the glovebox", "scope": other,
                                          "infer": False, "probe": b64(png(house.fresh[ANA]))})
    error_of(house.call("DELETE", f"/groups/{other}", json={"probe": b64(house.png[CHLOE])}), 404,
             "GroupNotFoundError")
    deleted = house.call("DELETE", f"/groups/{other}", json={"probe": b64(house.png[ANA])})
    assert deleted.json() == {"id": other, "deleted": True}
    assert not [n for n in found(house, BEN, "garage remote glovebox") if n["scope"] == other]
    error_of(house.call("DELETE", f"/groups/{other}", probe=house.clear[ANA]), 404, "GroupNotFoundError")


def test_a_non_member_learns_nothing_of_a_household(house):
    ids = house.ids
    gid = household(house, "Cabin", ANA, BEN)["id"]
    dan, png_dan = house.clear[DAN], b64(house.png[DAN])
    before = written(house.mem)
    calls = {  # each call as Dan, with the household's id and with one that never existed
        "join": lambda g: house.call("POST", f"/groups/{g}/members", probe=dan, member=dan),
        "remove": lambda g: house.call("DELETE", f"/groups/{g}/members/{ids['Ana']}", json={"probe": png_dan}),
        "leave": lambda g: house.call("DELETE", f"/groups/{g}/members/{ids['Dan']}", probe=dan),
        "delete": lambda g: house.call("DELETE", f"/groups/{g}", probe=dan),
        "write": lambda g: house.call("POST", "/memories", json={"text": "planted", "scope": g, "probe": png_dan}),
        "hide": lambda g: house.call("POST", "/memories", json={"text": "planted", "scope": g, "probe": png_dan,
                                                                "hidden_from": [ids["Ana"]]}),
    }
    for name, call in calls.items():
        member_of, never = call(gid), call(NEVER)
        error_of(member_of, 404, "GroupNotFoundError")
        assert member_of.content == never.content, name  # the same body, byte for byte
        assert str(gid) not in member_of.text and str(NEVER) not in never.text
        assert "Cabin" not in member_of.text and "Ana" not in member_of.text
    assert gid not in {g["id"] for g in house.call("POST", "/groups/mine", probe=house.fresh[DAN]).json()["results"]}
    assert written(house.mem) == before


# ---- refusals --------------------------------------------------------------------------------------------

def test_bad_bodies_are_a_422_that_names_the_field_and_writes_nothing(house):
    ana = b64(png(house.fresh[ANA]))
    gid = household(house, "Loft", ANA, BEN)["id"]
    token = house.call("POST", "/sessions", probe=house.clear[ANA]).json()["session"]
    note = {"text": "planted", "infer": False, "probe": ana}
    cases = {
        "a filter on an unknown field": ("/search", {"query": "x", "probe": ana, "filters": {"owner": 1}}, "owner"),
        "an unknown operator": ("/search", {"query": "x", "probe": ana, "filters": {"tags": {"like": "a"}}}, "like"),
        "filters not an object": ("/search", {"query": "x", "probe": ana, "filters": "scope"}, "filters"),
        "an empty AND": ("/search", {"query": "x", "probe": ana, "filters": {"AND": []}}, "AND"),
        "a list as a scope value": ("/search", {"query": "x", "probe": ana, "filters": {"scope": [1]}}, "scope"),
        "a threshold past 1": ("/search", {"query": "x", "probe": ana, "threshold": 2}, "threshold"),
        "nested metadata": ("/memories", {**note, "metadata": {"a": {"b": 1}}}, "nested"),
        "metadata not an object": ("/memories", {**note, "metadata": [1]}, "metadata"),
        "a bad metadata key": ("/memories", {**note, "metadata": {"a b": 1}}, "metadata key"),
        "hidden_from not a list": ("/memories", {**note, "scope": gid, "hidden_from": 3}, "hidden_from"),
        "hidden_from of words": ("/memories", {**note, "scope": gid, "hidden_from": ["chloe"]}, "hidden_from"),
        "hidden_from without scope": ("/memories", {**note, "hidden_from": [house.ids["Ben"]]}, "scope"),
        "hidden from oneself": ("/memories", {**note, "scope": gid, "hidden_from": [house.ids["Ana"]]}, "yourself"),
        "hidden from a stranger to it": ("/memories", {**note, "scope": gid, "hidden_from": [house.ids["Dan"]]},
                                         "not members"),
        "a scope of zero": ("/memories", {**note, "scope": 0}, "scope"),
        "a user id on a household": ("/groups", {"label": "X", "probe": ana, "user_id": "ana"}, "user_id"),
        "a blank label": ("/groups", {"label": "  ", "probe": ana}, "label"),
        "no label": ("/groups", {"probe": ana}, "label"),
        "a member id in the body": (f"/groups/{gid}/members", {"probe": ana, "member_probe": ana, "member": 3},
                                    "member"),
        "a label on a listing": ("/groups/mine", {"probe": ana, "label": "x"}, "label"),
        "an identity on an admin-less create": ("/groups", {"label": "X", "probe": ana, "identity": 1}, "identity"),
    }
    before = written(house.mem)
    for name, (path, body, named) in cases.items():
        response = house.call("POST", path, json=body)
        message = error_of(response, 422, "InvalidInputError")["message"]
        assert named.lower() in message.lower(), (name, message)
    for params, named in (({"filters": "{not json"}, "filters"), ({"filters": json.dumps({"tags": {"gt": 1}})}, "gt"),
                          ({"page_size": "0"}, "page_size"), ({"page": "2"}, "page_size"),
                          ({"page_size": "1001"}, "page_size")):
        message = error_of(house.call("GET", "/memories", session=token, params=params), 422,
                           "InvalidInputError")["message"]
        assert named.lower() in message.lower(), (params, message)
    form = house.call("POST", "/memories", probe=house.fresh[ANA], data={"text": "planted", "metadata": "{oops"})
    assert "metadata" in error_of(form, 422, "InvalidInputError")["message"].lower()
    error_of(house.call("POST", "/groups", session=token, probe=house.clear[ANA], data={"label": "Boat"}), 422,
             "InvalidInputError")  # household changes take probes, not a session
    error_of(house.call("POST", f"/groups/{gid}/members", probe=house.clear[ANA]), 403, "StepUpRequiredError")
    error_of(house.call("POST", "/groups", json={"label": "Boat"}), 403, "StepUpRequiredError")
    error_of(house.call("POST", "/groups", probe=house.fresh[STRANGER], data={"label": "Boat"}), 403,
             "StepUpRequiredError")
    error_of(house.call("POST", "/groups/mine", probe=house.fresh[STRANGER]), 403, "UnknownIdentityError")
    error_of(house.call("POST", "/groups", probe=house.clear[ANA], data={"label": "loft"}), 409,
             "DuplicateLabelError")  # Ana has a "Loft" already
    error_of(house.call("DELETE", "/groups/abc", probe=house.clear[ANA]), 422, "InvalidInputError")
    assert written(house.mem) == before


# ---- the operator -------------------------------------------------------------------------------------------

def test_an_agent_cannot_use_the_operator_s_routes(house):
    ids = house.ids
    gid = household(house, "Porch", ANA, BEN)["id"]
    before = written(house.mem)
    for method, path, body in (("POST", "/admin/groups", {"label": "Planted", "identity": ids["Dan"]}),
                               ("POST", f"/admin/groups/{gid}/members", {"identity": ids["Dan"]}),
                               ("DELETE", f"/admin/groups/{gid}/members/{ids['Ben']}", None),
                               ("DELETE", f"/admin/groups/{gid}", None)):
        error_of(house.call(method, path, json=body), 403, "NotAuthorisedError")
        error_of(house.call(method, path, key=None, json=body), 401, "AuthenticationError")
    assert written(house.mem) == before
    assert "store" not in house.call("GET", "/health").json()


def test_the_operator_acts_by_id_and_sees_households_in_the_counts(house):
    ids = house.ids
    created = house.call("POST", "/admin/groups", key="admin", json={"label": "Office", "identity": ids["Dan"]})
    assert created.status_code == 201, created.text
    gid = created.json()["id"]
    assert created.json()["members"] == [ids["Dan"]]
    added = house.call("POST", f"/admin/groups/{gid}/members", key="admin", json={"identity": ids["Chloe"]}).json()
    assert roster(added) == {ids["Dan"]: "Dan", ids["Chloe"]: "Chloe"}
    imported = house.call("POST", "/memories", key="admin", json={"text": "The office plant needs water on Mondays",
                                                                    "identity": gid, "infer": False})
    assert imported.status_code == 201, imported.text
    assert imported.json()["results"][0]["scope"] == gid and imported.json()["results"][0]["author"] is None
    assert imported.json()["results"][0]["id"] in {n["id"] for n in found(house, DAN, "office plant water")}
    store = house.call("GET", "/health", key="admin").json()["store"]
    assert store["per_group"][f"{gid}: Office"]["notes"] == 1
    assert sorted(store["per_group"][f"{gid}: Office"]["members"]) == sorted([ids["Dan"], ids["Chloe"]])

    before = written(house.mem)
    error_of(house.call("POST", "/admin/groups", key="admin", json={"label": "X", "identity": 999_999}),
             404, "UnknownIdentityError")
    error_of(house.call("POST", "/admin/groups", key="admin", json={"label": "X", "identity": gid}),
             404, "UnknownIdentityError")  # a household never founds one
    error_of(house.call("POST", f"/admin/groups/{NEVER}/members", key="admin", json={"identity": ids["Ana"]}),
             404, "UnknownIdentityError")
    error_of(house.call("POST", f"/admin/groups/{ids['Ana']}/members", key="admin", json={"identity": ids["Ben"]}),
             404, "UnknownIdentityError")  # a person is no household
    error_of(house.call("DELETE", f"/admin/groups/{gid}/members/{ids['Ana']}", key="admin"), 404,
             "GroupNotFoundError")
    error_of(house.call("DELETE", f"/admin/groups/{NEVER}", key="admin"), 404, "UnknownIdentityError")
    error_of(house.call("POST", "/admin/groups", key="admin", json={"label": "X", "identity": ids["Ana"],
                                                                     "probe": b64(house.png[ANA])}),
             422, "InvalidInputError")  # an operator's call takes no probe
    assert written(house.mem) == before

    removed = house.call("DELETE", f"/admin/groups/{gid}/members/{ids['Chloe']}", key="admin").json()
    assert removed["group"]["members"] == [ids["Dan"]] and not removed["deleted"]
    assert house.call("DELETE", f"/admin/groups/{gid}", key="admin").json() == {"id": gid, "deleted": True}
    assert f"{gid}: Office" not in house.call("GET", "/health", key="admin").json()["store"]["per_group"]
    assert not [n for n in found(house, DAN, "office plant water") if n["scope"] == gid]


def test_the_openapi_document_describes_the_household_routes(house):
    spec = house.call("GET", "/openapi.json", key=None).json()
    assert {"/v1/groups", "/v1/groups/mine", "/v1/groups/{group_id}/members",
            "/v1/groups/{group_id}/members/{member_id}", "/v1/groups/{group_id}", "/v1/admin/groups",
            "/v1/admin/groups/{group_id}/members", "/v1/admin/groups/{group_id}/members/{member_id}",
            "/v1/admin/groups/{group_id}"} <= set(spec["paths"])
    multipart = spec["paths"]["/v1/groups/{group_id}/members"]["post"]["requestBody"]["content"]
    assert "member_probe" in multipart["multipart/form-data"]["schema"]["properties"]
    schemas = spec["components"]["schemas"]
    assert {"scope", "hidden_from", "metadata"} <= set(schemas["AddBody"]["properties"])
    assert {"filters", "threshold"} <= set(schemas["SearchBody"]["properties"])
    assert {"scope", "author", "metadata", "hidden_from"} <= set(schemas["MemoryItem"]["properties"])


# ---- the Python client --------------------------------------------------------------------------------------

def test_the_client_mirrors_the_household_calls(house):
    bm, admin, ids, fresh, clear = house.bm, house.admin, house.ids, house.fresh, house.clear
    group = bm.create_group("Boathouse", probe=clear[BEN])
    assert group.members == [ids["Ben"]] and group.member_labels == ["Ben"]
    group = bm.add_member(group.id, probe=clear[BEN], member_probe=clear[CHLOE])
    assert sorted(group.members) == sorted([ids["Ben"], ids["Chloe"]])
    assert group.id in {g.id for g in bm.groups(probe=fresh[CHLOE])}
    note = bm.add("The boathouse key hangs by the oars", probe=fresh[BEN], scope=group.id, infer=False,
                  metadata={"place": "boathouse", "floor": 0})
    assert (note.scope, note.author, note.metadata) == (group.id, ids["Ben"], {"place": "boathouse", "floor": 0})
    secret = bm.add("The boathouse party for Chloe is on the 3rd", probe=fresh[BEN], scope=group.id,
                    hidden_from=[ids["Chloe"]], infer=False)
    assert secret.hidden_from == [ids["Chloe"]]
    mine = bm.add("My oar locker is 12", probe=fresh[CHLOE], infer=False, metadata={"place": "boathouse"})
    assert mine.scope is None and mine.author == ids["Chloe"]

    chloe = bm.search("boathouse key party oars", probe=fresh[CHLOE], k=50, filters={"metadata.place": "boathouse"})
    assert {n.id for n, _ in chloe.notes} == {note.id, mine.id}
    ben = bm.search("boathouse key party", probe=fresh[BEN], k=50, filters={"scope": group.id})
    assert {n.id for n, _ in ben.notes} == {note.id, secret.id}
    assert bm.search("boathouse key", probe=fresh[DAN], filters={"scope": group.id}).notes == []
    assert bm.search("boathouse key", probe=fresh[BEN], threshold=1.0).notes == []
    paged = [bm.get_all(probe=clear[BEN], filters={"scope": group.id}, page=page, page_size=1) for page in (1, 2, 3)]
    assert [[n.id for n in page] for page in paged] == [[note.id], [secret.id], []]
    with bm.session(clear[CHLOE]) as me:
        assert group.id in {g.id for g in me.groups()}
        listed = {n.id for n in me.get_all(filters={"metadata.place": "boathouse"})}
        assert listed == {note.id, mine.id}
        assert {n.id for n, _ in me.search("boathouse", filters={"scope": group.id}).notes} == {note.id}
        shared = me.add("The boathouse wifi is oarsome", scope=group.id, infer=False, metadata={"k": 1})
        assert shared.scope == group.id and shared.author == ids["Chloe"]

    with pytest.raises(GroupNotFoundError) as raised:
        bm.add_member(group.id, probe=clear[DAN], member_probe=clear[DAN])
    assert raised.value.status == 404
    with pytest.raises(GroupNotFoundError):
        bm.delete_group(NEVER, probe=clear[DAN])
    with pytest.raises(InvalidInputError):
        bm.add("x", probe=fresh[BEN], metadata={"a": {"b": 1}})
    with pytest.raises(InvalidInputError):
        bm.search("x", probe=fresh[BEN], filters={"nope": 1})
    with pytest.raises(AuthenticationError) as refused:
        bm.create_group("Planted", identity=ids["Dan"])  # an agent key: the operator's route is closed
    assert refused.value.status == 403
    with pytest.raises(InvalidInputError):
        bm.remove_member(group.id, ids["Chloe"])  # neither a probe nor operator=True

    after = bm.remove_member(group.id, ids["Chloe"], probe=clear[BEN])
    assert after is not None and after.members == [ids["Ben"]]
    assert group.id not in {g.id for g in bm.groups(probe=fresh[CHLOE])}
    assert bm.delete_group(group.id, probe=clear[BEN]) == group.id
    assert bm.search("boathouse key", probe=fresh[BEN], filters={"scope": group.id}).notes == []

    office = admin.create_group("Shed", identity=ids["Dan"])
    office = admin.add_member(office.id, identity=ids["Ana"])
    assert sorted(office.member_labels) == ["Ana", "Dan"]
    assert admin.remove_member(office.id, ids["Ana"], operator=True).members == [ids["Dan"]]
    assert admin.remove_member(office.id, ids["Dan"], operator=True) is None  # the last member: erased
    with pytest.raises(UnknownIdentityError):
        admin.delete_group(office.id, operator=True)
    shed = admin.create_group("Shed", identity=ids["Dan"])
    assert admin.delete_group(shed.id, operator=True) == shed.id
