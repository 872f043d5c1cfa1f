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

_CREDENTIAL_SHAPES = re.compile(
    "|".join(
        [
            # scheme://user:password@host (the user may be empty: redis://:pw@host)
            r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@]*:[^\s/@]+@",
            _START + r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
            _START + r"github_pat_[A-Za-z0-9_]{30,}",  # GitHub fine-grained tokens
            _START + r"glpat-[A-Za-z0-9_\-]{20,}",  # GitLab personal access tokens
            _START + r"npm_[A-Za-z0-9]{36}",  # npm tokens
            _START + r"pypi-AgE[A-Za-z0-9_\-]{50,}",  # PyPI tokens
            _START + r"xox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack tokens
            r"hooks\.slack\.com/services/T[A-Za-z0-9]+/",  # Slack webhooks
            _START + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])",  # AWS access key ids
            _START + r"sk-[A-Za-z0-9_\-]{20,}",  # OpenAI, Anthropic and similar keys
            _START + r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe keys
            _START + r"AIza[0-9A-Za-z_\-]{35}",  # Google API keys
            _START + r"hf_[A-Za-z0-9]{30,}",  # Hugging Face tokens
            # A JSON Web Token: base64url of '{"' twice, then a signature.
            _START + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
        ]
    )
)


def looks_like_credential(value: str) -> bool:
    """Whether value holds something shaped like a password or a token."""
    return _CREDENTIAL_SHAPES.search(value) is not None


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
