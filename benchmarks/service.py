"""`biomem serve` under load: 1, 8 and 32 concurrent clients asking, searching and adding with face probes.

    python -m benchmarks.service                    # 100 identities x 100 notes, 600 requests per level
    python -m benchmarks.service --requests 60      # a quick look

The store: 100 identities with 100 notes each. 16 of them are real people (`biomem.identity.samples`'
sample faces, enrolled from their photo with face-arcface-s; a photo in which the detector sees a
spectator too is left out, and --synthetic makes up the count); the other 84 are operator-imported
identities with random unit templates (no face can match them: they fill the gallery the gate
scans and own notes the gate must keep out). Every note carries its owner's marker ("[p017]"),
so a reply can be checked for another owner's note without trusting the server.

The server runs as a subprocess (`biomem serve` on 127.0.0.1, an agent API key, the offline LLM,
attempt limits off: every client is a legitimate owner, and they share one address). Each level
sends --requests requests from that many concurrent httpx clients, after --warmup unmeasured
requests at 8 clients (cold, the offline answerer embeds each retrieved sentence once; a kiosk in
use has them cached; the warm-up's own errors and wrong-owner notes are still counted): 80% ask, 15% search, 5% add,
each with a fresh augmented capture of a random real person as a JPEG probe. Recorded: p50 / p95
/ p99 latency, throughput, errors (any non-2xx or transport error), and wrong-owner notes in
any reply. Afterwards the server is stopped and the store is read directly: every acknowledged
add must be there exactly once under the right owner.

The bound: the same probes encoded back to back by face-arcface-s on one thread per core (2 here)
in this process (the server idle), i.e. what the CPU-bound probe encoder allows on this machine. A
second reference: each probe encoded together with a question (all-MiniLM-L6-v2), back to back on
as many threads: the CPU every ask and search needs before any gate, store, LLM or HTTP work. The target is a
service throughput of at least 80% of the bound at 32 clients, with zero errors and zero wrong-owner notes.

Where the CPU went, per level: the server's CPU per request (user + system, from /proc) and the
load generator's own (this process: httpx, asyncio), which runs on the same cores. From them, the
ceiling: the throughput if the cores did nothing but each request's probe and question encodings
and the generator's work, i.e. no HTTP, gate, store or answer at all. Prints a markdown table and
writes JSON (default benchmarks/results/service.json).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from PIL import Image

from benchmarks.common import RESULTS, arguments, write_result
from benchmarks.machine import machine_info
from biomem import BioMemory
from biomem.engine.keys import create_key
from biomem.errors import MultipleFacesError, NoFaceError
from biomem.identity.samples import augment, calibration_faces
from biomem.notes.llamacpp import free_port

# read when the store opens here and by the server, which inherits them: the store's template key goes to a
# throw-away folder, and every client is a legitimate owner (attempt limits off)
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="biomem-service-config-")
os.environ["BIOMEM_ATTEMPTS"] = "off"

ENCODER = "face-arcface-s"
CORES = os.cpu_count() or 2  # the server, the bound's threads and the load generator share them
MIX = (("ask", 0.80), ("search", 0.15), ("add", 0.05))
TOPICS = ["bank card PIN", "gym locker", "doctor's appointment", "cat's vaccine", "piano lesson", "parking spot",
          "marathon training", "library book", "bike lock code", "dentist"]


def marker(identity: int) -> str:
    return f"[p{identity:03d}]"


def jpeg(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def build_store(path: Path, notes: int, synthetic: int) -> tuple[dict[int, list[bytes]], str]:
    """The store at `path`; returns ({identity id: probe JPEGs} of the real people, an agent key)."""
    rng = np.random.default_rng(0)
    probes: dict[int, list[bytes]] = {}
    with BioMemory(path, encoder=ENCODER, disclosure="private", limits="off") as mem:
        people = [crops[0] for crops in calibration_faces()]
        encoder = mem.encoder()
        for n, face in enumerate(people):
            try:
                identity = mem.enroll(f"person {n:03d}", [face])
            except (NoFaceError, MultipleFacesError):  # a photo with a spectator behind: not one person
                continue
            captures = []
            for seed in range(1, 40):
                image = augment(face, seed=10_000 + 100 * n + seed)
                if len(encoder.detect(image)) == 1:
                    captures.append(jpeg(image))
                if len(captures) == 12:
                    break
            probes[identity.id] = captures
        dim = encoder.info.dim
        for n in range(synthetic):
            template = rng.standard_normal((1, dim)).astype(np.float32)
            mem.store.add_identity(f"imported {n:03d}", ENCODER, template / np.linalg.norm(template))
        for identity in mem.identities():
            texts = [f"{marker(identity.id)} My {TOPICS[i % len(TOPICS)]} note number {i} is {rng.integers(1000, 9999)}"
                     for i in range(notes)]
            mem.add_many(texts, identity=identity.id)
        secret, _ = create_key(mem.store, "load generator", "agent")
    return probes, secret


def encoder_bound(probes: list[bytes], threads: int = CORES) -> float:
    """Probe encodings per second, back to back on `threads` threads (face-arcface-s, this process)."""
    import modalities

    encoder = modalities.create(ENCODER)
    encoder.encode(probes[0])
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(encoder.encode, probes))
    return len(probes) / (time.perf_counter() - started)


def ask_floor(probes: list[bytes], threads: int = CORES) -> float:
    """Probe encodings plus question encodings (all-MiniLM-L6-v2) per second, back to back on
    `threads` threads: the CPU an ask needs before any gate, store, LLM or HTTP work."""
    import modalities
    from biomem.notes.textenc import TextEncoder

    encoder, text = modalities.create(ENCODER), TextEncoder()
    questions = [f"What is my {TOPICS[n % len(TOPICS)]} number {n}?" for n in range(len(probes))]

    def both(n: int) -> None:
        encoder.encode(probes[n])
        text.encode_one(questions[n])

    both(0)
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(both, range(len(probes))))
    return len(probes) / (time.perf_counter() - started)


def start_server(db: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "BIOMEM_DB": str(db), "BIOMEM_LLM": "offline", "BIOMEM_ATTEMPTS": "off"}
    server = subprocess.Popen([sys.executable, "-m", "biomem.cli", "serve", "--host", "127.0.0.1", "--port",
                               str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"biomem serve exited: {server.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError("biomem serve did not answer /v1/health in 180 s")


async def one(client: httpx.AsyncClient, kind: str, owner: int, probe: bytes, n: int, run: str) -> dict[str, Any]:
    """One request (the n-th of level `run`, which makes an added text unique); what it returned, for the checks."""
    files = {"probe": ("probe.jpg", probe, "image/jpeg")}
    topic = TOPICS[n % len(TOPICS)]
    route, data = {"ask": ("/v1/ask", {"question": f"What is my {topic}?"}),
                   "search": ("/v1/search", {"query": topic, "k": "10"}),
                   "add": ("/v1/memories", {"text": f"{marker(owner)} load note {run}.{n}: my new {topic}",
                                            "infer": "false"})}[kind]
    started = time.perf_counter()
    try:
        reply = await client.post(route, data=data, files=files)
        body = reply.json()
        status = reply.status_code
    except (httpx.HTTPError, ValueError) as exc:
        return {"kind": kind, "owner": owner, "ms": (time.perf_counter() - started) * 1000, "status": None,
                "error": exc.__class__.__name__}
    ms = (time.perf_counter() - started) * 1000
    notes = body.get("results", []) if isinstance(body, dict) else []
    wrong = [note.get("memory") or note.get("content") for note in notes
             if marker(owner) not in str(note.get("memory") or note.get("content") or "")]
    return {"kind": kind, "owner": owner, "ms": ms, "status": status, "wrong": wrong,
            "added": [(note["id"], data["text"]) for note in notes] if kind == "add" and status == 201 else []}


async def level(base: str, key: str, probes: dict[int, list[bytes]], clients: int, requests: int,
                seed: int) -> tuple[list[dict[str, Any]], float]:
    rng = random.Random(seed)
    kinds = rng.choices([k for k, _ in MIX], weights=[w for _, w in MIX], k=requests)
    owners = list(probes)
    plan = [(kind, owner, rng.choice(probes[owner]), n, str(seed))
            for n, (kind, owner) in enumerate((kind, rng.choice(owners)) for kind in kinds)]
    queue: asyncio.Queue = asyncio.Queue()
    for item in plan:
        queue.put_nowait(item)
    results: list[dict[str, Any]] = []

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120) as client:
            while not queue.empty():
                results.append(await one(client, *queue.get_nowait()))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return results, time.perf_counter() - started


def process_cpu(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(base: str, key: str, probes: dict[int, list[bytes]], clients: int, requests: int, seed: int,
             server: int) -> tuple[list[dict[str, Any]], float, dict[str, float]]:
    """level(), with the CPU the server process and this one (the load generator) used per request."""
    server_before, generator_before = process_cpu(server), time.process_time()
    results, seconds = asyncio.run(level(base, key, probes, clients, requests, seed))
    cpu = {"server_cpu_ms": (process_cpu(server) - server_before) * 1000 / len(results),
           "generator_cpu_ms": (time.process_time() - generator_before) * 1000 / len(results)}
    return results, seconds, cpu


def summary(clients: int, results: list[dict[str, Any]], seconds: float, bound: float, floor: float,
            cpu: dict[str, float]) -> dict[str, Any]:
    ms = np.array([r["ms"] for r in results])
    errors = [r for r in results if r["status"] is None or not 200 <= r["status"] < 300]
    throughput = len(results) / seconds
    # Core-milliseconds a request needs at the least: its probe and question encodings, as fast as
    # `floor` ran them on `cores` threads, plus the generator's own work on the same cores.
    least_ms = CORES * 1000 / floor + cpu["generator_cpu_ms"]
    ceiling = CORES * 1000 / least_ms
    return {"clients": clients, "requests": len(results), "seconds": round(seconds, 2),
            "p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1),
            "p99_ms": round(float(np.percentile(ms, 99)), 1), "throughput_rps": round(throughput, 2),
            "vs_encoder_bound": round(throughput / bound, 3),
            "server_cpu_ms_per_request": round(cpu["server_cpu_ms"], 1),
            "generator_cpu_ms_per_request": round(cpu["generator_cpu_ms"], 1),
            "ceiling_rps": round(ceiling, 1), "ceiling_vs_encoder_bound": round(ceiling / bound, 3),
            "errors": len(errors), "error_examples": [(r["kind"], r["status"], r.get("error")) for r in errors[:5]],
            "wrong_owner_notes": sum(len(r.get("wrong", [])) for r in results),
            "by_kind": {k: sum(r["kind"] == k for r in results) for k, _ in MIX}}


def check_adds(db: Path, acknowledged: list[tuple[int, int, str]]) -> dict[str, Any]:
    """Every acknowledged add present exactly once under its owner (read after the server stopped)."""
    with BioMemory(db, encoder=ENCODER, limits="off") as mem:
        missing, duplicated, misowned, other_id = 0, 0, 0, 0
        for owner, note_id, text in acknowledged:
            rows = mem.store.db.execute("SELECT id, owner_id FROM notes WHERE content = ?", [text]).fetchall()
            missing += not rows
            duplicated += len(rows) > 1
            misowned += any(row_owner != owner for _, row_owner in rows)
            other_id += any(row_id != note_id for row_id, _ in rows)
    return {"acknowledged": len(acknowledged), "missing": missing, "duplicated": duplicated, "wrong_owner": misowned,
            "not_the_acknowledged_id": other_id}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,8,32", help="concurrent clients per level")
    parser.add_argument("--requests", type=int, default=600, help="requests per level")
    parser.add_argument("--warmup", type=int, default=480, help="unmeasured requests first (0: start cold)")
    parser.add_argument("--notes", type=int, default=100, help="notes per identity")
    parser.add_argument("--synthetic", type=int, default=84, help="identities with random templates")
    parser.add_argument("--out", type=Path, default=RESULTS / "service.json")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="biomem-service-"))
    db = work / "service.db"
    started = time.perf_counter()
    probes, key = build_store(db, args.notes, args.synthetic)
    build_s = time.perf_counter() - started
    every_probe = [p for captures in probes.values() for p in captures]
    bound = encoder_bound(every_probe)
    floor = ask_floor(every_probe)
    print(f"store: {len(probes)} real + {args.synthetic} imported identities x {args.notes} notes in {build_s:.0f} s; "
          f"encoder bound {bound:.1f} probes/s, probe + question encodings {floor:.1f}/s on {CORES} threads",
          flush=True)

    port = free_port()
    server = start_server(db, port)
    rows, acknowledged = [], []
    try:
        if args.warmup:  # caches warm (the answerer's sentence embeddings), as on a kiosk in use
            results, seconds, cpu = measured(f"http://127.0.0.1:{port}", key, probes, 8, args.warmup, 100, server.pid)
            acknowledged += [(r["owner"], note_id, text) for r in results for note_id, text in r["added"]]
            warm = summary(8, results, seconds, bound, floor, cpu)
            print(f"warm-up: {args.warmup} requests at 8 clients, {warm['throughput_rps']} req/s, "
                  f"{warm['errors']} errors, {warm['wrong_owner_notes']} wrong-owner notes", flush=True)
        for n, clients in enumerate(int(c) for c in args.levels.split(",")):
            results, seconds, cpu = measured(f"http://127.0.0.1:{port}", key, probes, clients, args.requests, n,
                                             server.pid)
            rows.append(summary(clients, results, seconds, bound, floor, cpu))
            acknowledged += [(r["owner"], note_id, text) for r in results for note_id, text in r["added"]]
            print(f"done {clients} clients", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    adds = check_adds(db, acknowledged)

    print(f"\n{args.requests} requests per level (80% ask / 15% search / 5% add), face-arcface-s probes; "
          f"encoder bound {bound:.1f} probes/s, probe + question encodings {floor:.1f}/s\n")
    print("| clients | p50 ms | p95 ms | p99 ms | throughput (req/s) | vs encoder bound | vs probe + question "
          "| server CPU / req | generator CPU / req | ceiling (vs bound) | errors | wrong-owner notes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['clients']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | {r['throughput_rps']} | "
              f"{r['vs_encoder_bound']:.2f}× | {r['throughput_rps'] / floor:.2f}× | "
              f"{r['server_cpu_ms_per_request']} ms | {r['generator_cpu_ms_per_request']} ms | "
              f"{r['ceiling_rps']} req/s ({r['ceiling_vs_encoder_bound']:.2f}×) | {r['errors']} | "
              f"{r['wrong_owner_notes']} |")
    print(f"\nacknowledged adds: {adds['acknowledged']}, missing {adds['missing']}, duplicated {adds['duplicated']}, "
          f"under another owner {adds['wrong_owner']}, "
          f"under another id than acknowledged {adds['not_the_acknowledged_id']}")
    out = write_result(args.out, {"machine": machine_info("onnxruntime", "uvicorn", "fastapi", "httpx"),
                                  "args": arguments(args), "store_build_s": round(build_s, 1),
                                  "encoder_bound_probes_per_s": round(bound, 2),
                                  "probe_and_question_per_s": round(floor, 2),
                                  "warmup": warm if args.warmup else None, "levels": rows, "adds": adds})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
