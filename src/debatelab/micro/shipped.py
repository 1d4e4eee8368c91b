"""Where the shipped micro model lies and what its `recipe.json` says: read by `models` (which
prepares `bundled:micro-chain`) without importing torch or the build."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

#: The shipped micro model (package data): what `bundled:micro-chain` is prepared from, and the
#: output of rule `micro_model`.
SHIPPED_DIR = Path(__file__).parent / "micro-chain"
RECIPE_FILE = "recipe.json"
HELDOUT_FILE = "heldout.json"
#: Files whose sha256 `recipe.json` records: the model's and the tokenizer's (not the build's records).
HASHED_SUFFIXES = (".safetensors", ".json")


def file_hashes(folder: str | Path) -> dict[str, str]:
    """sha256 of every model and tokenizer file in `folder`, the build's own records left out."""
    folder = Path(folder)
    out = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix in HASHED_SUFFIXES and path.name not in (RECIPE_FILE, HELDOUT_FILE):
            out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def read_recipe(folder: str | Path = SHIPPED_DIR) -> dict:
    """A built folder's `recipe.json`."""
    return json.loads((Path(folder) / RECIPE_FILE).read_text())
