"""Credentials of an OpenAI-compatible engine (``OpenAIHTTPEngine``): the only place its secrets are read.

``api_key`` (or the variable named by ``api_key_env``, read here when the engine starts) goes in
``Authorization: Bearer ...``; ``user:password@`` written in base_url was moved by the config into ``basic_auth``
and goes as HTTP basic auth, so the URL the client holds has none. Secrets are read only here
(``get_secret_value``) and are removed from every error message, also from a server reply quoted in one; URLs in
messages go through ``redact_url``. A config read back from JSON holds the mask ``**********``: the engine refuses
it (``ConfigError``) rather than send it.
"""

from __future__ import annotations

import os
from urllib.parse import quote, unquote

import httpx

from dr_core.config import REDACTED, ConfigError, EngineConfig, is_redacted


def _reveal(secret, what: str, url: str) -> str:
    if is_redacted(secret):
        raise ConfigError(
            f"{url}: the engine's {what} is the mask {REDACTED!r}: this config was read back from JSON (a run record "
            "or Prefect's stored parameters), where secrets are never kept. Give the engines file again, or set "
            "api_key_env to the name of an environment variable that holds the key."
        )
    return secret.get_secret_value()


def credentials(config: EngineConfig, url: str) -> tuple[dict[str, str], httpx.Auth | None, tuple[str, ...]]:
    """(headers, auth, secret strings to keep out of messages) for a config; the only place secrets are read."""
    if config.basic_auth is not None:
        raw = _reveal(config.basic_auth, "basic_auth", url)
        user, _, password = raw.partition(":")
        user, password = unquote(user), unquote(password)
        return {}, httpx.BasicAuth(user, password), (raw, password, quote(password, safe=""))
    if config.api_key_env:
        token = os.environ.get(config.api_key_env, "")
        if not token:
            raise ConfigError(f"{url}: api_key_env names ${config.api_key_env}, which is not set or empty")
    elif config.api_key is not None:
        token = _reveal(config.api_key, "api_key", url)
    else:
        return {"Authorization": "Bearer EMPTY"}, None, ()
    return {"Authorization": f"Bearer {token}"}, None, (token,)
