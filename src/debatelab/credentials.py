"""Credentials never go in a config: `check_no_secrets` refuses a config (or a tracker run's config)
that holds an API key or token, by field name or by the shape of a value."""

from __future__ import annotations

import re

from .errors import ConfigError

#: fields that would hold a credential; a config names the environment variable instead
SECRET_FIELDS = {
    "api_key",
    "apikey",
    "token",
    "hf_token",
    "access_token",
    "auth_token",
    "password",
    "secret",
    "secret_key",
    "authorization",
}
#: credentials of OpenAI-style APIs (sk-...), the Hub (hf_...), a bearer header or a URL's password
#: (scheme://user:password@host), found anywhere inside a string: a key pasted into a URL or a longer
#: value ends up in .snakemake/metadata and the logs as surely as a bare one
SECRET_VALUE = re.compile(
    r"(?<![A-Za-z0-9])(?P<kind>sk-)[A-Za-z0-9_-]{16,}"
    r"|(?<![A-Za-z0-9])(?P<hub>hf_)[A-Za-z0-9]{20,}"
    r"|(?P<bearer>Bearer)\s+\S{8,}"
    r"|(?P<userinfo>[A-Za-z][A-Za-z0-9+.-]*://)[^\s/@:]*:[^\s/@]+@"
)


def check_no_secrets(config, where: str = "") -> None:
    """Refuse a config that holds an API key or token. Snakemake stores every job's params in plain
    text under .snakemake/metadata, and configs get committed: credentials come from environment
    variables only (`api_key_env`, HF_TOKEN), read inside the job."""
    items = config.items() if isinstance(config, dict) else enumerate(config) if isinstance(config, list) else ()
    for key, value in items:
        path = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and key.lower() in SECRET_FIELDS and value not in (None, ""):
            raise ConfigError(
                f"config: {path} holds a credential; keys and tokens never go in a config (Snakemake "
                f"stores job params in plain text under .snakemake/metadata). {_secret_hint(path)}"
            )
        found = SECRET_VALUE.search(value) if isinstance(value, str) else None
        if found:  # the error names the kind of credential, never a character of its value
            kind = {"kind": "sk-...", "hub": "hf_...", "bearer": "Bearer ...", "userinfo": "a password in a URL"}[
                found.lastgroup
            ]
            raise ConfigError(
                f"config: {path} looks like a key or token ({kind}); keys never go in a config. {_secret_hint(path)}"
            )
        check_no_secrets(value, path)


def _secret_hint(path: str) -> str:
    if "token" in path.lower().rsplit(".", 1)[-1]:
        return "Hugging Face reads its token from the environment: `export HF_TOKEN=...` (or `hf auth login`)."
    return (
        "Export the key before running snakemake (`export OPENAI_API_KEY=...`; SLURM jobs inherit the environment) "
        "and, for another variable, name it with `api_key_env: MY_KEY_VARIABLE` in the backend's options."
    )
