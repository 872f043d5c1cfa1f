"""Reaching the web for the web tools: the network guard, the capped fetch, decoding.

The tools (:mod:`zuno.tools.web`, :mod:`zuno.tools.web_search`) call this
package; it knows nothing of tool arguments or output:

- the network guard (``_guard``: :func:`parse_url`, :func:`check_domain`):
  every hop is checked against ``web.allowed_domains`` and
  ``web.blocked_domains``, its host is resolved here and, unless
  ``web.allow_private_networks`` is set, every address must be public; the
  connection goes to a checked address, so DNS rebinding cannot redirect it;
- the fetch (``_fetch``: :func:`fetch`, :class:`Page`): redirects followed hop
  by hop, the body streamed and capped, binaries told apart by type or
  signature and not downloaded;
- the content (``_content``: :func:`decode`): text decoded by the BOM, the
  ``Content-Type`` charset, the ``<meta>`` charset, then UTF-8 with a
  windows-1252 fallback;
- HTTP (``_http``: :data:`USER_AGENT`, :func:`http_failure`,
  :func:`status_failure`): what a failure means to the model.

Failures::

    bad URL, refused scheme, domain or address    ArgumentsRejected (nothing was sent)
    HTTP 4xx, TLS failure, unknown host           ToolError
    HTTP 5xx, 408, 425, 429, timeout, lost link   TransientError (retried after backoff)
"""

from __future__ import annotations

from zuno.integrations.web._content import decode
from zuno.integrations.web._fetch import Page, fetch
from zuno.integrations.web._guard import check_domain, parse_url
from zuno.integrations.web._http import USER_AGENT, http_failure, status_failure

__all__ = [
    "USER_AGENT",
    "Page",
    "check_domain",
    "decode",
    "fetch",
    "http_failure",
    "parse_url",
    "status_failure",
]
