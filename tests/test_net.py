"""hindsight.net: a free local port."""

import socket

from hindsight.net import free_port


def test_a_free_port_can_be_bound_and_listened_on():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
