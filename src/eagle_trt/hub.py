"""Checkpoints named by Hugging Face hub id: `org/name` or `org/name@revision` wherever a command takes --base or
--draft. A local directory always wins; a hub id is resolved through huggingface_hub, its cache first (what
`hf download` or transformers put there), a download when the hub is reachable and HF_HUB_OFFLINE is unset, and
otherwise a clear error naming the cache searched and the command that fills it. The snapshot's commit is what
the spec records (`hub_source`, derived from the snapshot path, so a checkpoint passed as its cache directory is
recorded the same way).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from eagle_trt.errors import EagleTrtError

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")
SNAPSHOT = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<commit>[0-9a-f]{40})$")
# what a base or draft needs from its repository: configs, tokenizer files, safetensors weights (.bin only when a
# repository has no safetensors: they are loaded with weights_only, but need not be fetched twice)
WANTED = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.jinja", "*.txt"]


def hub_source(path: Path) -> str | None:
    """`org/name@commit` when `path` is a snapshot directory of the Hugging Face cache, else None."""
    match = SNAPSHOT.search(Path(path).resolve().as_posix())
    return f"{match['org']}/{match['name']}@{match['commit']}" if match else None


def resolve_checkpoint(value: str | Path, what: str) -> Path:
    """The local directory of a --base/--draft value: itself when it exists (or is not a hub id), else the cached
    or downloaded snapshot of the hub id."""
    path = Path(value)
    text = str(value)
    match = HUB_ID.match(text)
    if path.exists() or match is None:
        return path
    try:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.errors import (GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                            RevisionNotFoundError)
    except ImportError:
        raise EagleTrtError(f"{what} {text!r} is not a local directory, and huggingface_hub (to read it as a hub id) "
                            "is not installed", "pip install 'eagle-trt[runtime]', or pass a local directory") from None
    repo, revision = match["repo"], match["revision"]
    cache = constants.HF_HUB_CACHE
    fetch = f"hf download {repo}" + (f" --revision {revision}" if revision else "")
    try:
        return _snapshot(snapshot_download, repo, revision, local_files_only=True)
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        pass  # not (wholly) cached: download below, unless offline
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True", "YES"):
        raise EagleTrtError(f"{what} {text!r} is not a local directory and not in the Hugging Face cache {cache} "
                            "(HF_HUB_OFFLINE is set)",
                            f"fetch it where the hub is reachable: `{fetch}` (with HF_HUB_CACHE={cache}), then run "
                            "again; or pass a local directory")
    try:
        return _snapshot(snapshot_download, repo, revision)
    except GatedRepoError:
        raise EagleTrtError(f"{what} {text!r} is a gated repository", "accept its license on huggingface.co and set "
                            "HF_TOKEN (or `hf auth login`), then run again") from None
    except RevisionNotFoundError:
        raise EagleTrtError(f"{what} {text!r}: revision {revision!r} does not exist",
                            "pass a branch, tag or commit of the repository") from None
    except RepositoryNotFoundError:
        raise EagleTrtError(f"{what} {text!r} is neither a local directory nor a hub repository",
                            "check the path or the repository id (org/name); private repositories need HF_TOKEN") \
            from None
    except Exception as exc:  # network errors: the hub cannot be reached from here
        raise EagleTrtError(f"{what} {text!r} is not a local directory, not in the Hugging Face cache {cache}, and "
                            f"the hub could not be reached ({type(exc).__name__}: {str(exc)[:200]})",
                            f"fetch it where the hub is reachable: `{fetch}` (with HF_HUB_CACHE={cache}), then run "
                            "again; or pass a local directory") from None


def _snapshot(snapshot_download, repo: str, revision: str | None, **kwargs) -> Path:
    """The snapshot with WANTED's files, and pytorch_model*.bin where the repository has no safetensors."""
    path = Path(snapshot_download(repo, revision=revision, allow_patterns=WANTED, **kwargs))
    if not any(path.glob("*.safetensors")):
        path = Path(snapshot_download(repo, revision=revision, allow_patterns=WANTED + ["pytorch_model*.bin"],
                                      **kwargs))
    return path
