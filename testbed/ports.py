"""Free TCP ports for throw-away servers."""

from __future__ import annotations

import socket


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago.

    The port is only probed (bound, then released), so another process may
    take it before the server binds it: callers that can detect a bind
    failure should retry with a new port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
