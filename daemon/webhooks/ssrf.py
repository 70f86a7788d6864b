"""The SSRF guard: which addresses a delivery may connect to, decided at send time.

A webhook URL is chosen by a user of the API, so without a guard the daemon
would POST wherever that user points it: its own loopback services, the
cloud metadata address (169.254.169.254), the private network behind it.
Each attempt therefore resolves the host itself, refuses every address that
is not globally routable, and hands back the address it checked; the sender
connects to that address and no other, so a DNS answer that changes between
the check and the connection (rebinding) changes nothing.

Refused unless ``webhooks.allow_private_networks``: loopback, private (RFC
1918, ULA fc00::/7, CGNAT 100.64/10), link-local (169.254/16, fe80::/10),
multicast, unspecified, reserved and documentation ranges, and IPv6 forms
that embed such an IPv4 address (IPv4-mapped ::ffff:0:0/96, IPv4-compatible
::/96, 6to4 2002::/16, NAT64 64:ff9b::/96, Teredo).
"""

from __future__ import annotations

import ipaddress
import socket

import trio

from daemon.errors import DocexError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPAT = ipaddress.ip_network("::/96")


class AddressRefused(DocexError):
    """The host resolves only to addresses a delivery may not reach."""


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
    ):
        if test:
            return reason
    if not ip.is_global:
        return "an address that is not globally routable"
    return None


def parse_ip(host: str) -> IPAddress | None:
    """`host` as an IP address if it is a literal one (brackets and zone allowed), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


async def resolve(host: str, port: int, *, allow_private: bool) -> IPAddress:
    """The address to connect to for `host`: the first one it resolves to that is allowed.

    Raises:
        ResolutionFailed: the name does not resolve.
        AddressRefused: every address it resolves to is refused (the message names one and why).
    """
    literal = parse_ip(host)
    if literal is not None:
        candidates = [literal]
    else:
        try:
            infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except (socket.gaierror, UnicodeError) as exc:
            raise ResolutionFailed(f"DNS lookup of {host} failed ({exc})") from exc
        candidates = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
        if not candidates:
            raise ResolutionFailed(f"DNS lookup of {host} returned no address")
    if allow_private:
        return candidates[0]
    for ip in candidates:
        if refusal(ip) is None:
            return ip
    first = candidates[0]
    where = f"{first} is" if literal is not None else f"{host} resolves to {first},"
    raise AddressRefused(
        f"refused to connect: {where} {refusal(first)} (webhooks.allow_private_networks is off)"
    )
