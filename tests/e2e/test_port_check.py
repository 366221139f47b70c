"""The demo's port check: a listening port is taken; a port whose last connections are only in TIME-WAIT
(right after the previous demo stopped) is free, as it is for the server, which binds with
SO_REUSEADDR."""

from __future__ import annotations

import socket

from demo.stack import port_is_free


def test_listening_port_is_taken_time_wait_is_not() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    assert not port_is_free(port)
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server side closes first: its end of the connection enters TIME-WAIT
    client.recv(1)
    client.close()
    listener.close()
    assert port_is_free(port)
