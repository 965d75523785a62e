"""Which names a request may reach this server by: no other web site can drive it from a visitor's browser.

A browser puts the name in the page's address into every request's Host header, and the origin of the page
that sent it into Origin. A page of evil.example whose name the attacker re-points at 127.0.0.1 (DNS rebinding)
reaches a local server with `Host: evil.example`; a form or script on evil.example posting to http://127.0.0.1
carries `Origin: http://evil.example`. Both are refused unless each name is this server's (`served_names`): a
loopback name (localhost, 127.0.0.0/8, ::1), the address it binds unless that is every address (0.0.0.0, ::),
and `Settings.allowed_hosts` (BIOMEM_ALLOWED_HOSTS, and on a Space its own SPACE_HOST). Ports are not compared.
A request without a Host header is no browser's (a browser always sends one) and is not refused.

    admitted(request.headers, served_names(settings))   # False: refuse before anything runs

The page checks every event (biomem.ui.doors), REST a keyless caller (biomem.server.auth).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Mapping
from urllib.parse import urlsplit

from ..settings import Settings


def loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def hostname(url: str) -> str:
    """The host name of a URL or //netloc in one spelling (`canonical`); "" when it has none or cannot be parsed."""
    try:
        return canonical(urlsplit(url).hostname or "")
    except ValueError:
        return ""


def canonical(name: str) -> str:
    """A host name lower-case, an IP address in its shortest form without brackets: one spelling to compare."""
    bare = name.strip().strip("[]").lower()
    try:
        return ipaddress.ip_address(bare).compressed
    except ValueError:
        return bare


def served_names(settings: Settings) -> frozenset[str]:
    """The names besides the loopback ones that requests may reach this server by: its bind address unless that
    is every address, and settings.allowed_hosts."""
    bound = canonical(settings.host)
    everywhere = bound in ("", "0.0.0.0", "::")
    return frozenset({*([] if everywhere else [bound]), *map(canonical, settings.allowed_hosts)})


def admitted(headers: Mapping[str, str], names: Collection[str]) -> bool:
    """Whether a request's Host, and its Origin when it has one, each name this server: a loopback name or one
    of `names` (served_names)."""
    host, origin = headers.get("host"), headers.get("origin")
    shown = [*([] if host is None else [hostname(f"//{host}")]), *([] if origin is None else [hostname(origin)])]
    return all(loopback(name) or name in names for name in shown)
