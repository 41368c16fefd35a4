"""Finding the client address behind proxies."""

from __future__ import annotations

import ipaddress

from serve_app.kit.clientip import client_address, client_ip, limit_subject

LB = [ipaddress.ip_network("10.0.0.0/8")]


def test_direct_client() -> None:
    assert client_ip("203.0.113.5", None, []) == "203.0.113.5"


def test_forwarded_for_ignored_unless_trusted() -> None:
    assert client_ip("203.0.113.5", "1.2.3.4", []) == "203.0.113.5"


def test_trusted_proxy_chain_is_walked_from_the_right() -> None:
    assert client_ip("10.0.0.2", "198.51.100.7, 10.0.0.9", LB) == "198.51.100.7"
    # A spoofed left-most entry does not win over the last untrusted hop.
    assert client_ip("10.0.0.2", "6.6.6.6, 198.51.100.7", LB) == "198.51.100.7"


HAPROXY = [ipaddress.ip_network("127.0.0.1/32")]


def test_serve_haproxy_peer_is_believed_for_one_hop() -> None:
    # Serve's HAProxy (peer) appended the address it saw.
    assert client_ip("127.0.0.1", "9.9.9.9, 127.0.0.1", [], HAPROXY) == "127.0.0.1"
    assert client_ip("127.0.0.1", "198.51.100.7", [], HAPROXY) == "198.51.100.7"
    assert client_ip("127.0.0.1", "198.51.100.7, 10.1.1.1", LB, HAPROXY) == "198.51.100.7"


def test_garbage_entries_stop_the_walk() -> None:
    assert client_ip("10.0.0.2", "not-an-ip, 198.51.100.7", LB) == "198.51.100.7"
    assert client_ip("10.0.0.2", "junk", LB) == "10.0.0.2"


def test_ports_and_ipv6() -> None:
    assert client_ip("10.0.0.2", "198.51.100.7:5555", LB) == "198.51.100.7"
    assert client_ip("10.0.0.2", "[2001:db8::1]:443", LB) == "2001:db8::1"
    assert client_ip("2001:db8::5", None, []) == "2001:db8::5"


def test_missing_peer() -> None:
    assert client_ip(None, None, []) == "unknown"


def test_the_parsed_address_gives_the_same_limit_subject_as_its_text() -> None:
    """Admission keys per-address limits from the address as it was parsed
    (no second parse); it must be the key the text gives."""
    cases = [
        ("203.0.113.5", None, []),
        ("10.0.0.2", "198.51.100.7, 10.0.0.9", LB),
        ("10.0.0.2", "2001:db8:1:2::77", LB),
        ("10.0.0.2", "::ffff:203.0.113.7", LB),
        ("10.0.0.2", "junk", LB),
        ("not-an-address", None, []),
        (None, None, []),
    ]
    for peer, forwarded, trusted in cases:
        found = client_address(peer, forwarded, trusted)
        text = client_ip(peer, forwarded, trusted)
        assert str(found) == text
        assert limit_subject(found) == limit_subject(text)
    assert limit_subject(client_address("10.0.0.2", "2001:db8:1:2::77", LB)) == (
        "ip:2001:db8:1:2::/64"
    )
