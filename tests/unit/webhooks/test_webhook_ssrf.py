"""The SSRF guard (daemon.webhooks.ssrf): every address class, and names resolved at send time."""

from __future__ import annotations

import ipaddress

import pytest

from daemon.webhooks.ssrf import (
    AddressRefused,
    ResolutionFailed,
    literal_refused,
    parse_ip,
    refusal,
    resolve,
    resolve_blocking,
)

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.0.9": "loopback",
    "::1": "loopback",
    "10.0.0.1": "private",
    "10.255.255.254": "private",
    "172.16.3.4": "private",
    "192.168.1.1": "private",
    "100.64.0.1": "not globally routable",  # CGNAT shared address space
    "fc00::1": "private",
    "fd12:3456::1": "private",
    "169.254.169.254": "link-local",  # cloud metadata
    "169.254.0.1": "link-local",
    "fe80::1": "link-local",
    "fec0::1": "site-local",  # deprecated, which Python counts global
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "ff02::1": "multicast",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "240.0.0.1": "reserved",
    "255.255.255.255": "reserved",
    "192.0.2.10": "private",  # documentation
    # IPv6 forms that carry a refused IPv4 address
    "::ffff:127.0.0.1": "loopback address embedded",
    "::ffff:10.0.0.1": "private address embedded",
    "::ffff:169.254.169.254": "link-local address embedded",
    "::127.0.0.1": "loopback address embedded",  # IPv4-compatible (deprecated)
    "2002:7f00:1::1": "loopback address embedded",  # 6to4 of 127.0.0.1
    "64:ff9b::a00:1": "private address embedded",  # NAT64 of 10.0.0.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "loopback address embedded",  # Teredo, client 127.0.0.1
}

ALLOWED = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"]


@pytest.mark.parametrize(("address", "reason"), sorted(REFUSED.items()))
def test_every_non_public_address_class_is_refused(address: str, reason: str) -> None:
    why = refusal(ipaddress.ip_address(address))
    assert why is not None and reason in why, (address, why)


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def test_literals_are_recognised_with_brackets_and_zones() -> None:
    assert parse_ip("[::1]") == ipaddress.ip_address("::1")
    assert parse_ip("fe80::1%eth0") == ipaddress.ip_address("fe80::1")
    assert parse_ip("example.com") is None


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "::ffff:127.0.0.1", "10.1.2.3", "169.254.169.254"])
async def test_literal_hosts_are_refused_without_a_lookup(host: str) -> None:
    with pytest.raises(AddressRefused, match="allow_private_networks is off"):
        await resolve(host, 443, allow_private=False)


async def test_a_name_resolving_to_loopback_is_refused_without_saying_its_address() -> None:
    # Before: "localhost resolves to 127.0.0.1, ...": a delivery's lastError answered users'
    # DNS lookups of internal names.
    refused = r"^refused to connect: localhost resolves to a loopback address"
    with pytest.raises(AddressRefused, match=refused) as caught:
        await resolve("localhost", 443, allow_private=False)
    assert "127.0.0.1" not in str(caught.value) and "::1" not in str(caught.value)


async def test_allowing_private_networks_returns_the_checked_address() -> None:
    assert await resolve("127.0.0.1", 80, allow_private=True) == ipaddress.ip_address("127.0.0.1")
    assert (await resolve("localhost", 80, allow_private=True)).is_loopback


async def test_a_public_literal_is_returned_as_is() -> None:
    assert await resolve("8.8.8.8", 443, allow_private=False) == ipaddress.ip_address("8.8.8.8")


async def test_a_name_that_does_not_resolve_is_a_resolution_failure() -> None:
    with pytest.raises(ResolutionFailed, match=r"DNS lookup of no-such-host\.invalid failed"):
        await resolve("no-such-host.invalid", 443, allow_private=False)


@pytest.mark.parametrize("spelling", ["127.1", "0x7f000001", "2130706433", "0177.0.0.1", "0x7f.1", "127.0.0.1"])
def test_numeric_ipv4_spellings_are_the_address_the_resolver_reads(spelling: str) -> None:
    assert parse_ip(spelling) == ipaddress.ip_address("127.0.0.1")


@pytest.mark.parametrize("name", ["dead.beef", "abc.de", "example.com", "1e100.net", "0x7f000001.example"])
def test_names_that_look_numeric_stay_names(name: str) -> None:
    assert parse_ip(name) is None


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST.", "api.localhost", "127.1", "0x7f000001", "2130706433",
                                  "[::1]", "::ffff:127.0.0.1", "169.254.169.254", "10.0.0.1", "100.64.0.1"])
def test_literal_refused_without_a_lookup(host: str) -> None:
    assert literal_refused(host)


@pytest.mark.parametrize("host", ["8.8.8.8", "minio.example.com", "[2606:4700:4700::1111]"])
def test_public_literals_and_names_pass_the_creation_check(host: str) -> None:
    assert not literal_refused(host)


@pytest.mark.parametrize("host", ["127.1", "0x7f000001", "localhost", "::1"])
def test_the_blocking_resolver_refuses_the_same_and_names_the_setting(host: str) -> None:
    with pytest.raises(AddressRefused, match=r"integrations\.allow_private_networks is off") as caught:
        resolve_blocking(host, 443, allow_private=False, setting="integrations.allow_private_networks")
    assert caught.value.reason == "a loopback address" and caught.value.address.is_loopback
    assert resolve_blocking(host, 443, allow_private=True, setting="x").is_loopback


async def test_the_async_resolver_reads_numeric_spellings_too() -> None:
    with pytest.raises(AddressRefused, match=r"^refused to connect: 127\.0\.0\.1 is a loopback address"):
        await resolve("0x7f000001", 443, allow_private=False)
