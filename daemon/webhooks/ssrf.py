"""The SSRF guard: which addresses a connection chosen by a user may reach, decided when
it is made. One guard for every such connection: webhook deliveries (``sender``) and S3
integration endpoints (``daemon.integrations.s3``), each with its own operator setting.

A webhook URL or an S3 endpoint is chosen by a user of the API, so without a
guard the daemon would connect wherever that user points it: its own
loopback services, the cloud metadata address (169.254.169.254), the private
network behind it. Each connection therefore resolves the host itself,
refuses every address that is not globally routable, and hands back the
address it checked; the caller connects to that address and no other, so a
DNS answer that changes between the check and the connection (rebinding)
changes nothing. `resolve` is for trio code, `resolve_blocking` for code that
already runs in a worker thread (boto3's connections).

A literal host is read the way the system resolver reads it, so the numeric
spellings of IPv4 (``127.1``, ``0x7f000001``, ``2130706433``, ``0177.0.0.1``)
are the addresses they stand for, not names.

Refused unless the setting allows private networks: loopback, private (RFC
1918, ULA fc00::/7, CGNAT 100.64/10), link-local (169.254/16, fe80::/10),
multicast, unspecified, reserved and documentation ranges, and IPv6 forms
that embed such an IPv4 address (IPv4-mapped ::ffff:0:0/96, IPv4-compatible
::/96, 6to4 2002::/16, NAT64 64:ff9b::/96, Teredo).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from typing import Any

import trio

from daemon.errors import DocexError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPAT = ipaddress.ip_network("::/96")


# What inet_aton (and so getaddrinfo) reads as an IPv4 address: digits, hex and dots only.
_NUMERIC_IPV4 = re.compile(r"[0-9a-fA-FxX.]+")
WEBHOOKS_SETTING = "webhooks.allow_private_networks"


class AddressRefused(DocexError):
    """The host resolves only to addresses a connection may not reach.

    `host` as given, `address` the first one it stands for, `reason` why that is refused
    ("a loopback address"), `literal` whether the host was an address itself.
    """

    def __init__(self, host: str, address: IPAddress, reason: str, *, literal: bool, setting: str) -> None:
        # Not which address a name stands for: the message reaches users (a delivery's
        # lastError), and would answer their DNS lookups of internal names.
        where = f"{address} is" if literal else f"{host} resolves to"
        super().__init__(f"refused to connect: {where} {reason} ({setting} is off)")
        self.host, self.address, self.reason, self.literal = host, address, reason, literal


class ResolutionFailed(DocexError):
    """The host does not resolve (a transient failure as far as retries go)."""


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or (ip in _COMPAT and int(ip) > 1):  # :: and ::1 are themselves, not IPv4
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal(ip: IPAddress) -> str | None:
    """Why a delivery may not connect to `ip` ("a loopback address", …); None if it may."""
    if isinstance(ip, ipaddress.IPv6Address) and (inner := _embedded_ipv4(ip)) is not None:
        reason = refusal(inner)
        return None if reason is None else f"{reason} embedded in an IPv6 address"
    for test, reason in (
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_reserved, "a reserved address"),
        (ip.is_private, "a private address"),
        # Deprecated (RFC 3879) but still routed inside some networks; Python counts it global.
        (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "a site-local address"),
    ):
        if test:
            return reason
    if not ip.is_global:
        return "an address that is not globally routable"
    return None


def parse_ip(host: str) -> IPAddress | None:
    """`host` as an IP address if it is a literal one (brackets and zone allowed, and every
    IPv4 spelling the resolver accepts), else None."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if _NUMERIC_IPV4.fullmatch(bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def literal_refused(host: str) -> bool:
    """Whether `host` is refused without a lookup: ``localhost`` (and its subdomains, which
    resolvers answer locally) or a literal address that is refused. For the checks at
    creation time; a name is checked again whenever it is resolved."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    literal = parse_ip(name)
    return literal is not None and refusal(literal) is not None


def _addresses(infos: Iterable[tuple[Any, ...]]) -> list[IPAddress]:
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def _choose(host: str, literal: IPAddress | None, candidates: list[IPAddress], *, allow_private: bool,
            setting: str) -> IPAddress:
    if not candidates:
        raise ResolutionFailed(f"DNS lookup of {host} returned no address")
    if allow_private:
        return candidates[0]
    for ip in candidates:
        if refusal(ip) is None:
            return ip
    first = candidates[0]
    reason = refusal(first)
    assert reason is not None
    raise AddressRefused(host, first, reason, literal=literal is not None, setting=setting)


async def resolve(host: str, port: int, *, allow_private: bool, setting: str = WEBHOOKS_SETTING) -> IPAddress:
    """The address to connect to for `host`: the first one it resolves to that is allowed.

    Raises:
        ResolutionFailed: the name does not resolve.
        AddressRefused: every address it resolves to is refused (the message names one and
            why, and `setting`, the operator setting that would allow it).
    """
    literal = parse_ip(host)
    if literal is not None:
        return _choose(host, literal, [literal], allow_private=allow_private, setting=setting)
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionFailed(f"DNS lookup of {host} failed ({exc})") from exc
    return _choose(host, None, _addresses(infos), allow_private=allow_private, setting=setting)


def resolve_blocking(host: str, port: int, *, allow_private: bool, setting: str) -> IPAddress:
    """`resolve` for code running in a worker thread (it blocks on the system resolver)."""
    literal = parse_ip(host)
    if literal is not None:
        return _choose(host, literal, [literal], allow_private=allow_private, setting=setting)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionFailed(f"DNS lookup of {host} failed ({exc})") from exc
    return _choose(host, None, _addresses(infos), allow_private=allow_private, setting=setting)
