"""API keys and tokens come from the environment only: the OpenAI-compatible backend reads its key
from the variable a config names (`api_key_env`, OPENAI_API_KEY by default), and a config holding a
key or token is refused with an error saying how to pass it instead. (The scan of a whole run's
files for a secret is in test_openai_backend, beside the real server it talks to.)"""

from __future__ import annotations

import re

import pytest
import yaml
from workflow_helpers import REPO_ROOT, snakemake

from debatelab.config import ConfigError, Experiment, validate_config
from debatelab.credentials import check_no_secrets
from debatelab.llm import make_backend
from debatelab.llm.openai_backend import ServerUnavailableError

REMOTE = "https://api.example.org/v1"


def _default_config_with(field: tuple[str, ...], value: str) -> dict:
    """The default config with `value` set at the key path `field` (made where missing)."""
    config = yaml.safe_load((REPO_ROOT / "config/config.yaml").read_text())
    node = config
    for key in field[:-1]:
        node = node.setdefault(key, {})
    node[field[-1]] = value
    return config


def test_the_key_comes_from_the_variable_the_config_names(monkeypatch):
    monkeypatch.setenv("DEBATELAB_TEST_KEY", "sk-from-env")
    backend = make_backend(
        "openai",
        "/nonexistent/model",
        base_url=REMOTE,
        api_key_env="DEBATELAB_TEST_KEY",
        served_model_name="deepseek-ai/DeepSeek-V3.1",
    )
    assert backend.api_key == "sk-from-env"
    assert "sk-from-env" not in backend.model_id  # the cache key names the server and model only


def test_no_variable_is_read_unless_the_config_names_one(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default-variable")
    with pytest.raises(
        ValueError, match=r"name the environment variable that holds its key with backend_options.api_key_env"
    ):
        make_backend("openai", "/nonexistent/model", base_url=REMOTE)
    assert make_backend("openai", "/nonexistent/model", base_url="http://127.0.0.1:8000/v1").api_key == "EMPTY"
    named = make_backend("openai", "/nonexistent/model", base_url=REMOTE, api_key_env="OPENAI_API_KEY")
    assert named.api_key == "sk-default-variable"
    config = validate_config(yaml.safe_load((REPO_ROOT / "config/config.yaml").read_text()))
    assert config["backends"]["openai"]["api_key_env"] is None  # the schema names no variable by default


def test_a_remote_server_without_a_named_key_is_refused_at_dry_run():
    config = yaml.safe_load((REPO_ROOT / "config/config.yaml").read_text())
    agent = next(iter(config["agents"]))
    config["agents"][agent].update(backend="openai", backend_options={"base_url": REMOTE})
    with pytest.raises(ConfigError, match=rf"agents.{agent}: its server {REMOTE} is not on this machine"):
        Experiment(validate_config(config))
    config["agents"][agent]["backend_options"]["api_key_env"] = "MY_KEY"
    Experiment(validate_config(config))


class _RecordingListener:
    """Whoever else binds a loopback port on a shared node: records every request's headers and
    answers 500 (the client gives up at once: max_retries 0)."""

    def __enter__(self):
        import http.server
        import threading

        seen = self.headers = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                seen.append(dict(self.headers))
                self.send_response(500)
                self.end_headers()

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_a_listener_on_loopback_never_receives_the_users_key(monkeypatch):
    from debatelab.llm import GenerationRequest, SamplingParams

    monkeypatch.setenv("OPENAI_API_KEY", "sk-users-own-key-abcdefghij")
    with _RecordingListener() as listener:
        backend = make_backend("openai", "/nonexistent/model", base_url=listener.url, max_retries=0, timeout=5)
        request = GenerationRequest(messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=4))
        with pytest.raises(ServerUnavailableError):
            backend.generate([request])
    assert listener.headers, "the backend sent nothing: the test proves nothing"
    sent = " ".join(f"{k}: {v}" for h in listener.headers for k, v in h.items())
    assert "sk-users-own-key" not in sent and "Bearer EMPTY" in sent


def test_an_unset_variable_is_an_error_naming_it_for_a_remote_server(monkeypatch):
    monkeypatch.delenv("DEBATELAB_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match=r"DEBATELAB_TEST_KEY.*export DEBATELAB_TEST_KEY=") as error:
        make_backend("openai", "/nonexistent/model", base_url=REMOTE, api_key_env="DEBATELAB_TEST_KEY")
    assert REMOTE in str(error.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "http://localhost:9/v1", "http://[::1]:8000/v1"])
def test_a_server_on_this_machine_needs_no_key(monkeypatch, url):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert make_backend("openai", "/nonexistent/model", base_url=url).api_key == "EMPTY"


@pytest.mark.parametrize(
    "field, value, says",
    [
        (("backends", "openai", "api_key"), "EMPTY", "backends.openai.api_key holds a credential"),
        (
            ("agents", "alice", "backend_options", "api_key"),
            "sk-proj-abcdefghijklmnopqrstu",
            "agents.alice.backend_options.api_key holds a credential",
        ),
        (("models", "tiny", "token"), "hf_abcdefghijklmnopqrstuvwxyz", "models.tiny.token holds a credential"),
        (
            ("agents", "alice", "backend_options", "extra_body", "user"),
            "sk-proj-abcdefghijklmnopqrstu",
            "agents.alice.backend_options.extra_body.user looks like a key",
        ),
    ],
)
def test_a_config_holding_a_credential_is_refused_with_how_to_pass_it(field, value, says):
    config = _default_config_with(field, value)
    with pytest.raises(ConfigError, match=rf"^config: {says}") as error:
        validate_config(config)
    message = str(error.value)
    assert value not in message  # the error never repeats the secret
    assert ("HF_TOKEN" if field[-1] == "token" else "export OPENAI_API_KEY") in message


def test_every_shipped_config_is_free_of_credentials():
    for path in sorted((REPO_ROOT / "config").rglob("*.yaml")):
        if path.name != "schema.yaml":
            check_no_secrets(yaml.safe_load(path.read_text()))  # raises naming the field


@pytest.mark.slow
def test_snakemake_refuses_a_config_with_a_key_before_any_job(tmp_path):
    config = yaml.safe_load((REPO_ROOT / "config/config.yaml").read_text())
    config.setdefault("backends", {}).setdefault("openai", {})["api_key"] = "sk-proj-abcdefghijklmnopqrstu"
    path = tmp_path / "with_key.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, "--configfile", str(path), "-n", check=False, timeout=300)
    assert proc.returncode != 0
    assert "backends.openai.api_key holds a credential" in proc.stdout + proc.stderr
    assert "sk-proj-abcdefghijklmnopqrstu" not in proc.stdout + proc.stderr
    assert not (tmp_path / ".snakemake/metadata").exists() or not any((tmp_path / ".snakemake/metadata").iterdir())


@pytest.mark.parametrize(
    "field, value, kind",
    [
        (
            ("backends", "openai", "base_url"),
            "https://me:sk-proj-abcdefghijklmnopqrstu@api.example.com/v1",
            "a password in a URL",
        ),
        (("backends", "openai", "base_url"), "https://alice:hunter2secret@api.example.com/v1", "a password in a URL"),
        (("agents", "alice", "backend_options", "extra_headers", "x-note"), "key=sk-abcdefghijklmnopqrstuv;", "sk-..."),
        (("models", "tiny", "source"), "hf://org/model?auth=hf_abcdefghijklmnopqrstuvwxyz", "hf_..."),
        (("agents", "alice", "backend_options", "extra_headers", "x-auth"), "header Bearer abcdefghijkl", "Bearer ..."),
    ],
)
def test_a_credential_inside_a_longer_string_or_a_url_is_refused_without_repeating_it(field, value, kind):
    config = _default_config_with(field, value)
    with pytest.raises(ConfigError, match=rf"^config: {re.escape('.'.join(field))} looks like a key or token") as error:
        check_no_secrets(config)
    message = str(error.value)
    assert f"({kind})" in message
    secret = re.search(r"(sk-|hf_)\w[\w-]+|hunter2secret|abcdefghijkl", value).group(0)
    assert secret not in message and secret[3:9] not in message  # not a piece of it either


@pytest.mark.parametrize(
    "value",
    [
        "task-abcdefghijklmnopqrstuvwxyz",
        "https://api.example.com:8443/v1",
        "risk-abcdefghijklmnopqrstuvwxyz",
        "file:///home/me/models/x",
        "user@example.com",
    ],
)
def test_strings_that_only_resemble_a_credential_pass(value):
    check_no_secrets({"backends": {"openai": {"base_url": value}}})
