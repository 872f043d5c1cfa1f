"""The environment a command receives: the runtime's, minus what looks secret.

A variable is withheld when its name matches a pattern of ``env_remove``
(``*_TOKEN``, ``*_AUTH`` ...) or when its value has the shape of a credential,
whatever its name: a URL with a password in it
(``DATABASE_URL=postgres://u:password@h/db``), a known token format (GitHub,
GitLab, npm, PyPI, Slack, AWS, OpenAI-style ``sk-`` keys, Google API keys,
Hugging Face), a JSON Web Token, or a PEM private key. A name in ``env_keep``
is passed whatever its name or value: the user lets it through on purpose.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

__all__ = ["command_environment", "looks_like_credential", "withheld_names"]

_START = r"(?<![A-Za-z0-9])"
"""A token starts a value or follows a character that cannot belong to it."""

# (a literal every match holds, the shape). The literal is looked for first, so a
# long value without it costs one substring search per shape. A shape is matched
# by its shortest form where nothing follows it ("{30}", not "{30,}").
_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (literal, re.compile(shape))
    for literal, shape in (
        # scheme://user:password@host (the user may be empty: redis://:pw@host)
        ("://", r"://[^\s/:@]*:[^\s/@]+@"),
        ("gh", _START + r"gh[pousr]_[A-Za-z0-9]{30}"),  # GitHub tokens
        ("github_pat_", _START + r"github_pat_[A-Za-z0-9_]{30}"),  # GitHub fine-grained
        ("glpat-", _START + r"glpat-[A-Za-z0-9_\-]{20}"),  # GitLab personal access tokens
        ("npm_", _START + r"npm_[A-Za-z0-9]{36}"),  # npm tokens
        ("pypi-AgE", _START + r"pypi-AgE[A-Za-z0-9_\-]{50}"),  # PyPI tokens
        ("xox", _START + r"xox[abposr]-[A-Za-z0-9\-]{10}"),  # Slack tokens
        ("hooks.slack.com", r"hooks\.slack\.com/services/T[A-Za-z0-9]+/"),  # Slack webhooks
        ("IA", _START + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),  # AWS access key ids
        ("sk-", _START + r"sk-[A-Za-z0-9_\-]{20}"),  # OpenAI, Anthropic and similar keys
        ("k_", _START + r"[sr]k_(?:live|test)_[A-Za-z0-9]{16}"),  # Stripe keys
        ("AIza", _START + r"AIza[0-9A-Za-z_\-]{35}"),  # Google API keys
        ("hf_", _START + r"hf_[A-Za-z0-9]{30}"),  # Hugging Face tokens
        # A JSON Web Token: base64url of '{"' twice, then a signature.
        (
            "eyJ",
            _START + r"eyJ[A-Za-z0-9_\-]{8,4096}\.eyJ[A-Za-z0-9_\-]{8,8192}\.[A-Za-z0-9_\-]{8}",
        ),
        ("PRIVATE KEY-----", r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----"),
    )
)


def looks_like_credential(value: str) -> bool:
    """Whether value holds something shaped like a password or a token."""
    return any(literal in value and shape.search(value) for literal, shape in _SHAPES)


def withheld_names(
    remove: Iterable[str],
    base: Mapping[str, str] | None = None,
    *,
    keep: Iterable[str] = (),
) -> list[str]:
    """The names of base's variables (the process environment by default) commands do
    not receive, sorted.

    Patterns are shell globs matched case-insensitively (``*_TOKEN`` removes
    ``GITHUB_TOKEN`` and ``npm_token``); a value shaped like a credential is
    withheld whatever its name. A name in keep (exact, case-sensitive) is never
    withheld: it is passed on purpose.
    """
    source = os.environ if base is None else base
    patterns = [p.upper() for p in remove]
    kept = frozenset(keep)
    return sorted(
        name
        for name, value in source.items()
        if name not in kept
        and (any(fnmatchcase(name.upper(), p) for p in patterns) or looks_like_credential(value))
    )


def command_environment(
    remove: Iterable[str],
    base: Mapping[str, str] | None = None,
    *,
    keep: Iterable[str] = (),
) -> dict[str, str]:
    """base (the process environment by default) without the variables of
    :func:`withheld_names`."""
    source = dict(os.environ if base is None else base)
    for name in withheld_names(remove, source, keep=keep):
        del source[name]
    return source
