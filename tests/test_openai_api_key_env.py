"""The OpenAI-compatible backend reads its API key from the environment variable a config names
(`api_key_env`), so a config never holds the key itself."""
from __future__ import annotations

import pytest

from debatelab.llm import make_backend


def test_api_key_env_reads_the_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("DEBATELAB_TEST_KEY", "sk-from-env")
    backend = make_backend("openai", "/nonexistent/model", base_url="http://127.0.0.1:9/v1",
                           api_key_env="DEBATELAB_TEST_KEY", served_model_name="deepseek-ai/DeepSeek-V3.1")
    assert backend.api_key == "sk-from-env"
    assert "sk-from-env" not in backend.model_id  # the cache key names the server and model only


def test_an_unset_api_key_env_fails_naming_the_variable(monkeypatch):
    monkeypatch.delenv("DEBATELAB_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="DEBATELAB_TEST_KEY"):
        make_backend("openai", "/nonexistent/model", base_url="http://127.0.0.1:9/v1", api_key_env="DEBATELAB_TEST_KEY")


def test_without_api_key_env_the_configured_key_is_used():
    backend = make_backend("openai", "/nonexistent/model", base_url="http://127.0.0.1:9/v1", api_key="EMPTY")
    assert backend.api_key == "EMPTY"
